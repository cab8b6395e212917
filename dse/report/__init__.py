"""Reports and figures from the record store."""

from .figures import ParetoPlot, pareto_plot
from .html import Report, report_data, write_report
from .pareto import pareto_mask

__all__ = ["ParetoPlot", "pareto_plot", "Report", "report_data", "write_report", "pareto_mask"]
