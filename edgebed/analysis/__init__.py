"""Analysis of run directories: metrics, plots, tables and the report that combines them."""
from .report import ReportError, ReportResult, write_report

__all__ = ["ReportError", "ReportResult", "write_report"]
