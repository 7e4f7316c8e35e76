"""The Docker runtime: containers per device (runtime), kernel link shaping (links), joining a
container from a forked agent (nsjoin), the agent image (images) and docker compose projects (compose)."""
