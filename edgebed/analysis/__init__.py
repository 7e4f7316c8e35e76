"""Analysis of run directories: metrics, plots, tables and the report that combines them.

``write_report`` and friends are imported on first use: reading a run (``edgebed.load_run``,
``analysis.runs``) must not import the plotting stack (matplotlib takes most of a second)."""

__all__ = ["ReportError", "ReportResult", "write_report"]


def __getattr__(name):
    if name in __all__:
        from . import report
        return getattr(report, name)
    raise AttributeError(f"module 'edgebed.analysis' has no attribute {name!r}")
