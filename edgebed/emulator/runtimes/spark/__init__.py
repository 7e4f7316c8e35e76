"""The Spark runtime: agents inside one barrier stage (runtime) on a Spark session (session)."""
