"""Studies: a grid of scenarios run cell by cell (runner) and reported with seed bands (report)."""
