"""Swarm runtime: devices as Docker Swarm tasks, shaped on every node by a link agent."""
