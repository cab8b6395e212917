"""The cost of every op of a graph as the plan decides it, for arrays of candidates.

The plan of the graph (`dse.plan.graph_plan.plan_graph`: per op its unit, the copies that
prepare its operands, what it reads and writes) is the one the lowering emits; this walk
charges it, vectorised over candidates, with the plan's per-candidate decisions: tiles
(`plan_matmuls`), Ball streams (`StreamCosts`: ReLU, and scale ops where
`takes_stream` prefers them), splits (`busiest_elements`), syncs (`sync_after`). Charges are the
emulator's (`dse.cost`): a core op ``ceil(elements x cycles per element)`` on the busiest
worker, a matmul `matmul_cost`, a Ball stream its transfers and Ball latency back to back,
and a FENCE or BARRIER per synchronisation.
"""

from __future__ import annotations

import numpy as np

from ..cost.core import split_share
from ..mapping import CandidateArrays, MatmulShape
from ..plan.graph_plan import PLAN_KNOBS, Copy, OpPlan, copy_elements, plan_graph
from ..plan.matmul import MatmulPlans
from ..plan.memory import pad
from ..plan.split import busiest_elements
from ..plan.units import sync_after, too_many_workers
from ..units import UNITS
from ..units.charges import ACTIVITY_FIELDS, Charges, OpCost  # noqa: F401  (read from here too)
from ..units.matrix import gemm_figures
from ..workload.graph import Graph
from .stream_cost import StreamCosts


class GraphCost:
    """Charges the plan of a graph (`plan_graph`) for a batch of candidates, op by op."""

    def __init__(self, graph: Graph, params: CandidateArrays, chips=None):
        self.graph, self.params, self.n = graph, params, params.n
        # The chip configs, for the plan's whole-chip decisions (Ball streams); without them
        # those ops are costed on the core.
        self.chips = chips
        self.workers = np.asarray(params.workers, dtype=np.int64)
        self.worker_counts = np.unique(self.workers).tolist()
        self.tiles: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # blocked accumulators: (tm, tn) per candidate
        self.plans: dict[MatmulShape, MatmulPlans] = {}
        self.overlapped: dict[MatmulShape, MatmulPlans] = {}  # tiles as picked, before a serial re-costing
        self.search_groups = None  # `candidate_groups` of the overlapped search's candidates, shared by its shapes
        self.activity: dict = {}  # per shape, the picked tiles' `MatmulActivity`
        # read-only constants laid out so far: (what, tensor, op kind) -> [(tiles, feasible)]
        self.constants: dict[tuple, list[tuple[tuple[np.ndarray, ...], np.ndarray]]] = {}
        self.streams = StreamCosts(graph, params, chips) if chips is not None else None
        # Why a candidate with more workers than cores is refused ("" for the others).
        self.too_many_reason = np.full(self.n, "", dtype=object)
        for index in np.flatnonzero(self.workers > params.cores).tolist():
            self.too_many_reason[index] = too_many_workers(int(params.workers[index]), params.chip_names[index],
                                                           int(params.cores[index]))
        # What closes an op's part, per candidate: any sync at all, and whether it is a BARRIER
        # (read per worker count, then spread).
        counts = np.array(self.worker_counts, dtype=np.int64)
        at = self.worker_at = np.searchsorted(counts, self.workers)  # each candidate's in worker_counts
        closing = {(count, ball): sync_after(count, ball) for count in self.worker_counts for ball in (False, True)}
        self.closes_after_ball = np.array([closing[count, True] is not None for count in self.worker_counts],
                                          dtype=np.int64)[at]
        self.closes_after_core = np.array([closing[count, False] is not None for count in self.worker_counts],
                                          dtype=np.int64)[at]
        self.sync_cycles = np.where(np.array([closing[count, True] == "barrier" for count in self.worker_counts],
                                             dtype=bool)[at], params.barrier_cycles, params.fence_cycles)

    # ------------------------------------------------------------ charges
    def core_op(self, charges: Charges, kind: str, op, dst_shape, src_shapes, elements: int, cpe: np.ndarray):
        """A core op, split across workers where the plan splits it."""
        # per distinct worker count, spread to the candidates (`worker_at`)
        share = np.array([busiest_elements(kind, op, dst_shape, src_shapes, elements, count)
                          for count in self.worker_counts], dtype=np.float64)[self.worker_at]
        charges.core += np.ceil(share * cpe)
        charges.busy += np.ceil(elements * cpe)
        charges.core_busy += np.ceil(elements * cpe)

    def core_op_tiled(self, charges: Charges, batch: int, M: int, N: int, tm: np.ndarray, cpe: np.ndarray):
        """A core op over a blocked accumulator's padded grid (batch, Mt, tm, Nt, tn): split
        along the first axis of at least 2, vectorised over the candidates' tiles."""
        Mp, Np = pad(M), pad(N)
        total = batch * Mp * Np
        share = split_share(total, (batch, Mp // tm, tm), self.workers)
        charges.core += np.ceil(share * cpe)
        charges.busy += np.ceil(total * cpe)
        charges.core_busy += np.ceil(total * cpe)

    def close(self, charges: Charges, after_ball: bool):
        charges.syncs += self.closes_after_ball if after_ball else self.closes_after_core

    def copy(self, charges: Charges, copy: Copy):
        """One of the plan's copies, charged as the core copy the lowering emits."""
        if copy.kind == "unblock":
            batch, M, N = copy.blocked
            self.core_op_tiled(charges, batch, M, N, self.tiles[copy.tensor][0], self.params.copy_cpe)
        elif copy.apply == "relu":  # a fused ReLU applied while copying: a core "relu" op
            self.core_op(charges, "relu", None, copy.shape, [copy.shape], copy_elements(copy), self.params.relu_cpe)
        else:
            self.core_op(charges, "copy", None, copy.shape, [copy.shape], copy_elements(copy), self.params.copy_cpe)
        self.close(charges, False)

    # ------------------------------------------------------------ ops
    def op_cost(self, plan: OpPlan) -> OpCost:
        unit = UNITS[plan.unit]  # its charge (`dse.units`), beside the lowering's emitter
        if unit.cost is not None:  # a unit that sums its own cost (grouped: two paths per candidate)
            return unit.cost(self, plan)
        n_cands, params = self.n, self.params
        charges = Charges(n_cands)
        for copy in plan.copies:
            self.copy(charges, copy)
        label, gemm = unit.charge(self, charges, plan)
        zeros = np.zeros(n_cands, dtype=np.int64)
        feasible = np.ones(n_cands, dtype=bool)
        reason = np.full(n_cands, "", dtype=object)
        banks, sram, rows_used, tiles, dma_bytes, shared = zeros, zeros, zeros, (zeros, zeros, zeros), zeros, zeros
        compute = preload = workspace = zeros
        workers_used = np.minimum(self.workers, params.cores)
        units = np.full(n_cands, label, dtype=object) if isinstance(label, str) else label.astype(object)
        if gemm is not None:
            figures = gemm_figures(self, charges, plan, gemm, workers_used)
            feasible, reason, compute = figures.feasible, figures.reason, figures.compute
            banks, sram, rows_used = figures.banks, figures.sram, figures.rows_used
            dma_bytes, shared, tiles = figures.dma_bytes, figures.shared, figures.tiles
            workers_used, preload, workspace = figures.workers_used, figures.preload, figures.workspace
        if charges.sram is not None:
            sram, banks, rows_used = charges.sram, charges.banks, charges.bank_rows
        if charges.dma_bytes is not None:
            dma_bytes = charges.dma_bytes
        if charges.ball_busy is not None:
            compute = charges.ball_busy
        # More workers than cores: the lowering refuses the whole graph, before any op.
        too_many = self.workers > params.cores
        if too_many.any():
            feasible = feasible & ~too_many
            reason = np.where(too_many, self.too_many_reason, reason)
        cycles = np.round(charges.core + charges.ball + charges.syncs * self.sync_cycles).astype(np.int64)

        def own(values, dtype=np.int64):  # every field its own array (callers write into them)
            if type(values) is np.ndarray and values.shape == (n_cands,):
                return values.astype(dtype)  # a copy, as np.array makes
            if np.ndim(values) == 0:
                return np.full(n_cands, values, dtype=dtype)
            return np.array(np.broadcast_to(values, (n_cands,)), dtype=dtype)

        return OpCost(own(units, object), own(feasible, bool), own(reason, object), own(np.where(feasible, cycles, 0)),
                      own(compute), own(np.round(charges.dma)), own(np.round(charges.core)),
                      own(np.where(feasible, np.round(charges.ball), 0)),
                      own(np.where(feasible, np.round(charges.busy), 0)),
                      own(charges.syncs), own(dma_bytes), own(sram), own(shared), own(rows_used), own(banks),
                      *[own(tile) for tile in tiles], own(workers_used), own(preload),
                      *[own(np.where(feasible, np.round(getattr(charges, name)), 0)) for name in ACTIVITY_FIELDS],
                      own(np.where(feasible, workspace + charges.workspace_bytes, 0)))


def graph_costs(graph: Graph, params: CandidateArrays, chips=None, plans=None) -> list[OpCost]:
    """Every op's cost for every candidate, each candidate following the plan of its own
    ``mapping.fusion`` and ``mapping.channels_last`` (candidates are costed per plan, then
    put back in order). `plans`: the graph's plan as given (one plan for every candidate),
    e.g. with a placement's hand-offs marked on it (`dse.analytical.placed.estimate_layers`)."""
    if plans is not None:
        costs = GraphCost(graph, params, chips)
        return [costs.op_cost(plan) for plan in plans]
    keys = list(zip(*(getattr(params, name) for name in PLAN_KNOBS)))
    choices = list(dict.fromkeys(keys))
    if len(choices) <= 1:
        costs = GraphCost(graph, params, chips)
        return [costs.op_cost(plan) for plan in plan_graph(graph, *(choices[0] if choices else (None, None)))]
    parts = []
    for choice in choices:
        idx = np.flatnonzero(np.array([key == choice for key in keys]))
        sub = graph_costs(graph, params.take(idx), None if chips is None else [chips[index] for index in idx])
        parts.append((idx, sub))
    out = []
    for op_index in range(len(graph.ops)):
        first = parts[0][1][op_index]
        fields = {}
        for name, value in vars(first).items():
            arr = np.empty(params.n, dtype=value.dtype)
            for idx, sub in parts:
                arr[idx] = getattr(sub[op_index], name)
            fields[name] = arr
        out.append(OpCost(**fields))
    return out


__all__ = ["ACTIVITY_FIELDS", "OpCost", "graph_costs"]
