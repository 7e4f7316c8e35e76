"""Device traces: per-device availability, compute speed and bandwidth over time (``format.py``), the
FedScale importer (``fedscale.py``) and a seeded population generator (``population.py``)."""
from .format import COLUMNS, Trace, TraceError, TracePoint, read_trace, write_trace

__all__ = ["COLUMNS", "Trace", "TraceError", "TracePoint", "read_trace", "write_trace"]
