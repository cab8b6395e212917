"""The runner's stages, as one named chain (CHAIN, declared at the end of this module):

    capture -> frontend -> plan -> analytical -> prune -> emulator -> numerics -> record

Each stage is a plain function with typed inputs and outputs; none knows of samplers or of
the store. The driver (`Sweep`) proposes candidates, batches them, calls the stages and
writes what they return; `evaluate_items` (what pool and Dask workers run) calls the
evaluation stages, EVALUATION, for the run stage a work item belongs to. Capture and
frontend run once per sweep (frontend also in a worker, for a quantization granularity
not prepared up front), plan once per graph, analytical once per chunk of a batch, prune once, emulator
and numerics once per emulated candidate, record once per store transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence
from ..records.outcomes import ANALYTICALLY_INFEASIBLE, CONSTRAINT_REJECTED, NOT_EMULATED

from ..mapping import Candidate
from ..plan.graph_plan import OpPlan, plan_graph
from ..workload.graph import Graph
from .emulation import Emulated, EmulationWorkload, emulate, judge_numerics
from .stages import AnalyticalResult, Evidence, Outcome, Workload, analytical_batch, frontend_workload, placed_batch


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable
    doc: str


def capture(recipe: str, params: dict, check: bool = False) -> Graph:
    """The recipe's captured graph: the first stage of its frontend pipeline (the recipe's
    own steps; the analytical stage's very pipeline, and with `check` the emulator stage's
    checked one), so a sweep captures once, and not at all when the graph cache
    (dse.workload.cache) has it."""
    from ..frontend import run_pipeline

    return run_pipeline(recipe, params, check=check).graphs[0]


def frontend(recipe: str, params: dict, emulated: Sequence[str | None] = ()) -> Workload:
    """`emulated`: the quantization granularities to prepare emulation workloads for (none
    without the emulator stage). Other granularities' graphs are made on first use, by the
    workload itself, with the same steps."""
    return frontend_workload(recipe, params, emulated)


def plan(graph: Graph) -> list[OpPlan]:
    """The graph's plan: per op its unit and the copies that prepare its operands, made
    once (kept on the graph, so it travels with the graph to pool and Dask workers)."""
    return plan_graph(graph)


def analytical(graph, cands: list[Candidate], calibration: dict | None = None,
               ppa_calibration: dict | None = None) -> list[AnalyticalResult]:
    """The plan's per-candidate choices (tiles, Ball stream or core op, splits) and their
    costs, for a batch in one vectorised call. `graph` is a Graph, or a staged workload's
    (role, graph) list: each stage costed on its place (`placed_batch`)."""
    if isinstance(graph, list):
        return placed_batch(graph, cands, calibration, ppa_calibration)
    return analytical_batch(graph, cands, calibration, ppa_calibration)


@dataclass
class Pruning:
    emulate: list[int]  # candidate ids the emulator stage runs, in the order given
    pruned: list[tuple[int, str]]  # (candidate id, why it is not emulated)


def prune(analysed: Iterable[tuple[int, bool, dict]], done: set[int], policy: str, top_k: int,
          metric: str, direction: str, reasons: dict[int, str] | None = None) -> Pruning:
    """`analysed`: (candidate id, analytically feasible, analytical totals) per candidate;
    `done`: candidates whose emulator run is finished already (neither emulated nor pruned
    again); `policy`: the spec's stages.emulator (top_k or all); `reasons`: why each
    infeasible one is (a constraint's rejection is named as such, not as infeasible)."""
    reasons = reasons or {}
    analysed = list(analysed)
    sign = 1 if direction == "minimize" else -1
    ranked = sorted((totals.get(metric, math.inf) * sign, cid) for cid, feasible, totals in analysed if feasible)
    keep = ranked if policy == "all" else ranked[:top_k]
    chosen = {cid for _, cid in keep}
    rank = {cid: i for i, (_, cid) in enumerate(ranked, 1)}
    out = Pruning([], [])
    for cid, feasible, _ in analysed:
        if cid in done:
            continue
        if cid in chosen:
            out.emulate.append(cid)
        elif feasible:
            out.pruned.append((cid, f"not emulated: rank {rank[cid]} of {len(ranked)} feasible by the analytical "
                                    f"{metric}, outside the top {top_k}"))
        elif (reasons.get(cid) or "").startswith(CONSTRAINT_REJECTED):
            out.pruned.append((cid, NOT_EMULATED + reasons[cid]))
        else:
            why = reasons.get(cid)
            out.pruned.append((cid, NOT_EMULATED + ANALYTICALLY_INFEASIBLE + (f": {why}" if why else "")))
    return out


def emulator(work: EmulationWorkload, cand: Candidate) -> Emulated:
    return emulate(work, cand)


def numerics(emulated: Emulated) -> Evidence:
    # The comparison itself runs inside the emulation (dse.numerics.run.emulate_graph compares
    # the emulated memory with the reference right after the run); this stage records its
    # verdict and judges the run.
    return judge_numerics(emulated)


def record(outcomes: Sequence[Outcome]) -> list[dict]:
    """The results Store.finish_runs takes, one per outcome."""
    return [dict(run_id=o.run_id, status=o.status, metrics=o.metrics, reason=o.reason or None,
                 error=o.error or None, traceback=o.traceback or None) for o in outcomes]


CAPTURE = Stage(
    "capture", capture,
    "the recipe's PyTorch module traced to a graph (the baseline's source-derived counts come from it)")
FRONTEND = Stage(
    "frontend", frontend,
    "the recipe's frontend steps: the graph the analytical model costs and, with the emulator stage, "
    "the emulation workload (inputs, references) per quantization granularity")
PLAN = Stage(
    "plan", plan,
    "the graph's plan (dse.plan): each op's unit and the copies that prepare its operands, for every candidate")
ANALYTICAL = Stage(
    "analytical", analytical,
    "a batch of candidates: the plan's per-candidate choices (tiles, Ball stream or core op, splits) and their "
    "costs in one vectorised call: feasibility, cycles, DMA bytes, SRAM")
PRUNE = Stage(
    "prune", prune,
    "which analytically feasible candidates are emulated (top_k or all), and why every other one is not")
EMULATOR = Stage(
    "emulator", emulator,
    "one candidate lowered and emulated: cycles, counters, host time")
NUMERICS = Stage(
    "numerics", numerics,
    "the emulated outputs against PyTorch's: a run whose results differ fails")
RECORD = Stage(
    "record", record,
    "the rows written for finished runs")

CHAIN: tuple[Stage, ...] = (CAPTURE, FRONTEND, PLAN, ANALYTICAL, PRUNE, EMULATOR, NUMERICS, RECORD)

# The stages a worker runs for a work item, by the run stage it belongs to (the store's
# `stage` of the run: analytical or emulator). Analytical takes a batch of candidates;
# the emulator's stages take one candidate, each the output of the one before.
EVALUATION: dict[str, tuple[Stage, ...]] = {
    "analytical": (ANALYTICAL,),
    "emulator": (EMULATOR, NUMERICS),
}


def run_stages(stages: Sequence[Stage], *inputs):
    """The first stage on `inputs`, every next one on the output of the one before."""
    value = stages[0].run(*inputs)
    for stage in stages[1:]:
        value = stage.run(value)
    return value


__all__ = ["Stage", "CHAIN", "EVALUATION", "CAPTURE", "FRONTEND", "PLAN", "ANALYTICAL", "PRUNE", "EMULATOR",
           "NUMERICS", "RECORD", "Pruning", "run_stages"]
