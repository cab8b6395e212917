"""The plan stage: per op its unit and the copies that prepare its operands."""

from __future__ import annotations

from ...plan.graph_plan import OpPlan, plan_graph
from ...workload.graph import Graph
from .stage import Stage


def plan(graph: Graph) -> list[OpPlan]:
    """The graph's plan, made once (kept on the graph, so it travels with the graph to pool
    and Dask workers)."""
    return plan_graph(graph)


PLAN = Stage(
    "plan", plan,
    "the graph's plan (dse.plan): each op's unit and the copies that prepare its operands, for every candidate")
