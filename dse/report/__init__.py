"""Reports and figures from the record store."""

from .data import ExperimentView, experiment_view
from .figures import Figure, ParetoPlot, history_plot, op_breakdown_plot, pareto_plot
from .html import HistoryReport, Report, write_history, write_report
from .pareto import pareto_mask

__all__ = ["ExperimentView", "experiment_view", "Figure", "ParetoPlot", "history_plot", "op_breakdown_plot",
           "pareto_plot", "HistoryReport", "Report", "write_history", "write_report", "pareto_mask"]
