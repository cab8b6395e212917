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

import math
from dataclasses import fields, replace

import numpy as np

from ..cost.core import GRAPH_OP, charged_elements, split_share
from ..cost.matmul import matmul_activity, matmul_cost
from ..mapping import CandidateArrays, MatmulShape
from ..plan.chains import chain_elements, chain_extent, chain_parts
from ..plan.graph_plan import PLAN_KNOBS, Copy, OpPlan, copy_elements, plan_graph
from ..plan.grouped import on_matrix
from ..plan.matmul import MatmulPlans, plan_matmuls
from ..plan.memory import pad, padded_shape
from ..plan.split import busiest_elements
from ..plan.units import conv_pad, sync_after, too_many_workers
from ..workload.graph import Graph, scale_array
from .charges import ACTIVITY_FIELDS, Charges, OpCost  # noqa: F401  (read from here too)
from .scan import scan_cost
from .stream_cost import StreamCosts


class GraphCost:
    """Charges the plan of a graph (`plan_graph`) for a batch of candidates, op by op."""

    def __init__(self, graph: Graph, params: CandidateArrays, chips=None):
        self.graph, self.params, self.n = graph, params, params.n
        # The chip configs, for the plan's whole-chip decisions (Ball streams); without them
        # those ops are costed on the core.
        self.chips = chips
        self.workers = np.asarray(params.workers, dtype=np.int64)
        self.worker_counts = sorted(set(int(w) for w in self.workers))
        self.tiles: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # blocked accumulators: (tm, tn) per candidate
        self.plans: dict[MatmulShape, MatmulPlans] = {}
        self.overlapped: dict[MatmulShape, MatmulPlans] = {}  # tiles as picked, before a serial re-costing
        self.activity: dict = {}  # per shape, the picked tiles' `MatmulActivity`
        # read-only constants laid out so far: (what, tensor, op kind) -> [(tiles, feasible)]
        self.constants: dict[tuple, list[tuple[tuple[np.ndarray, ...], np.ndarray]]] = {}
        self.streams = StreamCosts(graph, params, chips) if chips is not None else None
        self.too_many_reason = np.array([too_many_workers(w, name, c) for w, name, c
                                         in zip(params.workers, params.chip_names, params.cores)], dtype=object)
        # What closes an op's part, per candidate: any sync at all, and whether it is a BARRIER.
        closing = {(w, ball): sync_after(w, ball) for w in self.worker_counts for ball in (False, True)}
        self.closes_after_ball = np.array([closing[int(w), True] is not None for w in self.workers], dtype=np.int64)
        self.closes_after_core = np.array([closing[int(w), False] is not None for w in self.workers], dtype=np.int64)
        self.sync_cycles = np.where([closing[int(w), True] == "barrier" for w in self.workers],
                                    params.barrier_cycles, params.fence_cycles)

    # ------------------------------------------------------------ charges
    def core_op(self, charges: Charges, kind: str, op, dst_shape, src_shapes, elements: int, cpe: np.ndarray):
        """A core op, split across workers where the plan splits it."""
        busiest = {w: busiest_elements(kind, op, dst_shape, src_shapes, elements, w) for w in self.worker_counts}
        share = np.array([busiest[int(w)] for w in self.workers], dtype=np.float64)
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
        if plan.unit == "grouped":
            return self._grouped(plan)
        if plan.unit == "scan":  # its step's ops, T times (`dse.analytical.scan`)
            return scan_cost(self, plan)
        op = plan.op
        n, p = self.n, self.params
        charges = Charges(n)
        for copy in plan.copies:
            self.copy(charges, copy)
        unit = "core"
        gemm = None
        if plan.unit in ("matrix", "conv"):
            gemm, unit = self._gemm(charges, plan), "matrix"
            for copy in plan.after:
                self.copy(charges, copy)
        elif plan.unit == "scale":
            unit = self._scale_op(charges, plan)
        elif plan.unit == "relu":
            unit = self._relu(charges, plan)
        elif plan.unit == "chain":
            self._chain(charges, plan)
        elif plan.unit in ("view", "fused"):  # a descriptor, or applied by its reader's copy
            unit = "none" if plan.unit == "view" else "fused"
        else:
            self._generic(charges, plan)
        zeros = np.zeros(n, dtype=np.int64)
        feasible = np.ones(n, dtype=bool)
        reason = np.full(n, "", dtype=object)
        banks, sram, rows_used, tiles, dma_bytes, shared = zeros, zeros, zeros, (zeros, zeros, zeros), zeros, zeros
        compute = preload = workspace = zeros
        workers_used = np.minimum(self.workers, p.cores)
        units = np.full(n, unit, dtype=object) if isinstance(unit, str) else unit.astype(object)
        if gemm is not None:
            plans = gemm
            feasible = plans.feasible.copy()
            # the very words the lowering raises (`Infeasible`)
            reason = np.array([f"op {op.name}: {r}" if r else "" for r in plans.reason], dtype=object)
            charges.core += np.where(feasible, plans.core_cycles, 0)
            charges.busy += np.where(feasible, plans.busy_cycles, 0)
            charges.ball += np.where(feasible, plans.cycles - plans.core_cycles, 0)
            compute = plans.compute_cycles
            charges.dma += plans.dma_cycles
            banks, sram, rows_used, dma_bytes = plans.banks, plans.sram_bytes, plans.bank_rows, plans.dma_bytes
            shared = np.where(feasible, plans.shared_bytes, 0)
            tiles = (plans.tm, plans.tn, plans.tk)
            workers_used = np.where(feasible, plans.workers_used, workers_used)
            preload = np.where(feasible & (plans.shared_bytes > 0), plans.preload_cycles, 0)
            act = self._activity(plan.gemm, plans)
            charges.workspace_bytes = charges.workspace_bytes + self._conv_workspace(plan)
            for name in ("bank_reads", "bank_writes", "shared_reads", "shared_writes"):
                setattr(charges, name, getattr(charges, name) + np.where(feasible, getattr(act, name), 0))
            charges.ball_macs = charges.ball_macs + np.where(feasible, act.macs, 0)
            charges.core_busy = charges.core_busy + np.where(feasible, act.core_cycles, 0)
            workspace = np.where(feasible, act.workspace_bytes - self._bound_bytes(plan, plans, act), 0)
        if charges.sram is not None:
            sram, banks, rows_used = charges.sram, charges.banks, charges.bank_rows
        if charges.dma_bytes is not None:
            dma_bytes = charges.dma_bytes
        if charges.ball_busy is not None:
            compute = charges.ball_busy
        # More workers than cores: the lowering refuses the whole graph, before any op.
        too_many = self.workers > p.cores
        if too_many.any():
            feasible = feasible & ~too_many
            reason = np.where(too_many, self.too_many_reason, reason)
        cycles = np.round(charges.core + charges.ball + charges.syncs * self.sync_cycles).astype(np.int64)

        def own(x, dtype=np.int64):  # every field its own array (callers write into them)
            return np.array(np.broadcast_to(x, (n,)), dtype=dtype)

        return OpCost(own(units, object), own(feasible, bool), own(reason, object), own(np.where(feasible, cycles, 0)),
                      own(compute), own(np.round(charges.dma)), own(np.round(charges.core)),
                      own(np.where(feasible, np.round(charges.ball), 0)),
                      own(np.where(feasible, np.round(charges.busy), 0)),
                      own(charges.syncs), own(dma_bytes), own(sram), own(shared), own(rows_used), own(banks),
                      *[own(t) for t in tiles], own(workers_used), own(preload),
                      *[own(np.where(feasible, np.round(getattr(charges, f)), 0)) for f in ACTIVITY_FIELDS],
                      own(np.where(feasible, workspace + charges.workspace_bytes, 0)))

    def _conv_workspace(self, plan: OpPlan) -> int:
        """DRAM a conv's copies lay out beyond the plan's tensors: the zero-padded image
        (`pad`) and the gathered A (`gather`: M x K int8, padded)."""
        out = 0
        for copy in plan.copies:
            if copy.kind == "pad":
                n, *spatial, C = copy.shape
                padded = tuple(s + lo + hi for s, (lo, hi) in zip(spatial, conv_pad(plan.op)))
                out += pad(math.prod(padded_shape((n, *padded, C))), 64)
            elif copy.kind == "gather":
                out += pad(pad(plan.gemm.M) * pad(plan.gemm.K), 64)
        return out

    def _activity(self, shape: MatmulShape, plans: MatmulPlans):
        """The picked tiles' activity (`matmul_activity`), once per shape."""
        if shape not in self.activity:
            ok = plans.feasible
            tile = lambda a: np.where(ok, a, 16)  # noqa: E731  (any tile where none is legal)
            self.activity[shape] = matmul_activity(self.params, shape, tile(plans.tm), tile(plans.tn), tile(plans.tk),
                                                   plans.dma_bytes)
        return self.activity[shape]

    def _bound_bytes(self, plan: OpPlan, plans: MatmulPlans, act) -> np.ndarray:
        """Of the op's workspace, the read-only constants an earlier op laid out already, per
        candidate: a weight's blocked copy read again in the same tiles (tn, tk), a bias
        replicate in the same (tm, tn), keyed as the lowering binds them (`Dram.constant`);
        the frontend gave byte-identical weights one name."""
        op, shape, out = plan.op, plan.gemm, np.zeros(self.n, dtype=np.int64)
        if shape.b_weight and not shape.b_preloaded and act.weight_blob_bytes:
            seen = self._seen(("weight", op.inputs[1], op.kind, op.attrs.get("groups", 1)), (plans.tn, plans.tk),
                              plans.feasible)
            out += np.where(seen, act.weight_blob_bytes, 0)
        if shape.bias and len(op.inputs) > 2:
            seen = self._seen(("bias", op.inputs[2], op.kind), (plans.tm, plans.tn), plans.feasible)
            out += np.where(seen, act.bias_blob_bytes, 0)
        return out

    def _seen(self, key: tuple, tiles: tuple[np.ndarray, ...], feasible: np.ndarray) -> np.ndarray:
        """Per candidate: an earlier op laid out the constant `key` in these tiles."""
        earlier = self.constants.setdefault(key, [])
        seen = np.zeros(self.n, dtype=bool)
        for before, ok in earlier:
            seen |= ok & np.logical_and.reduce([np.asarray(a) == np.asarray(b) for a, b in zip(tiles, before)])
        earlier.append((tuple(np.asarray(t).copy() for t in tiles), np.asarray(feasible).copy()))
        return seen

    def _grouped(self, plan: OpPlan) -> OpCost:
        """A grouped conv: per candidate, the Ball path (its copies, the block-diagonal GEMM,
        the unblock after it) where `grouped.on_matrix` takes it, else the conv on the core
        (reading its operands as they are: only their unblock / standardise copies)."""
        on = on_matrix(self.graph, plan, self.params, self._overlapped(plan.gemm))
        ball = self.op_cost(replace(plan, unit="conv"))
        g = plan.gemm  # the Ball path's accumulator, unblocked into the plan's matrix after it
        ball.workspace_bytes = ball.workspace_bytes + np.where(ball.feasible, pad(g.batch * pad(g.M) * pad(g.N) * 4, 64), 0)
        core = self.op_cost(replace(plan, unit="core", after=(),
                                    copies=tuple(c for c in plan.copies if c.kind not in ("pad", "gather"))))
        return OpCost(*[np.where(on, getattr(ball, f.name), getattr(core, f.name)) for f in fields(OpCost)])

    def _overlapped(self, shape: MatmulShape) -> MatmulPlans:
        """The tiles the plan picks, by the overlapped cost whatever the emulator's mode
        (and that cost), once per shape: repeated layers share one evaluation."""
        if shape not in self.overlapped:
            serial = self.params.serial
            params = replace(self.params, serial=np.zeros(self.n, dtype=bool)) if serial.any() else self.params
            self.overlapped[shape] = plan_matmuls(params, shape)
        return self.overlapped[shape]

    def _plans(self, shape: MatmulShape) -> MatmulPlans:
        """The picked tiles costed in each candidate's timing mode."""
        if shape not in self.plans:
            picked = self._overlapped(shape)
            if self.params.serial.any():  # those tiles costed in serial timing
                ok = picked.feasible
                col = lambda a: np.where(ok, a, 16)[:, None]  # noqa: E731  (any tile where none fits)
                cost = matmul_cost(self.params, shape, col(picked.tm), col(picked.tn), col(picked.tk))
                values = dict(picked.values)
                for name in ("cycles", "compute_cycles", "dma_cycles", "core_cycles", "busy_cycles", "preload_cycles"):
                    values[name] = np.where(ok, getattr(cost, name)[:, 0], 0)
                picked = MatmulPlans(picked.feasible, picked.reason, values)
            self.plans[shape] = picked
        return self.plans[shape]

    def _gemm(self, charges: Charges, plan: OpPlan) -> MatmulPlans:
        plans = self._plans(plan.gemm)
        # the packing copies, closed before the Ball reads them
        charges.syncs += np.where(self.workers > 1, (plans.core_cycles > 0).astype(np.int64), 0)
        # a shared copy of the weight, loaded before any worker's Ball reads it
        charges.syncs += np.where(plans.shared_bytes > 0, self.closes_after_core, 0)
        self.close(charges, True)
        self.tiles[plan.op.outputs[0]] = (np.maximum(plans.tm, 16), np.maximum(plans.tn, 16))
        return plans

    def _scale_op(self, charges: Charges, plan: OpPlan) -> str | np.ndarray:
        """quantize / requantize / dequantize: the plan's Ball stream where the plan takes it
        (`StreamCosts`, per candidate), else the core op."""
        op = plan.op
        shape = tuple(self.graph.tensors[op.outputs[0]].shape)
        src = plan.reads[0]
        b = plan.blocked_source
        core = Charges(self.n)
        tiles = self.tiles[op.inputs[0]] if b is not None else None
        if b is not None:
            self.core_op_tiled(core, b.batch, b.M, b.N, tiles[0], self.params.mul_cpe)
            core.workspace_bytes += pad(b.batch * pad(b.M) * pad(b.N) * 4, 64)  # the expanded fp32 scale
        else:
            scale_t = scale_array(op.attrs, shape)
            if scale_t.ndim == 0 or scale_t.size == 1:
                self.core_op(core, "scale", None, shape, [src.shape],
                             max(math.prod(shape), math.prod(src.shape)), self.params.scale_cpe)
            else:
                sshape = tuple(scale_t.shape)
                self.core_op(core, "mul", None, shape, [src.shape, sshape],
                             max(math.prod(shape), math.prod(src.shape), math.prod(sshape)), self.params.mul_cpe)
                core.workspace_bytes += pad(scale_t.size * 4, 64)  # the scale constant
        self.close(core, False)
        on_core = "epilogue" if b is not None else "core"
        stream = self.streams.scale_charges(op, src, plan.writes, shape, tiles) if self.streams is not None else None
        if stream is None:
            charges.add(core)
            return on_core
        on_ball, ball, kinds = stream
        self.close(ball, True)
        charges.select(on_ball, ball, core)
        return np.where(on_ball, kinds, on_core) if on_ball.any() else on_core

    def _relu(self, charges: Charges, plan: OpPlan) -> str | np.ndarray:
        """The ReLU Ball's stream where the candidate's chip has the Ball (`relu_stream`),
        else the core op. Returns the unit (per candidate when they differ)."""
        stream = self.streams.relu_charges(plan.op, plan.reads[0], plan.writes) if self.streams is not None else None
        if stream is None:
            self._generic(charges, plan)
            return "core"
        on_ball, ball, _ = stream
        self.close(ball, True)
        core = Charges(self.n)
        self._generic(core, plan)
        charges.select(on_ball, ball, core)
        return "relu" if on_ball.all() else np.where(on_ball, "relu", "core")

    def _chain(self, charges: Charges, plan: OpPlan):
        """A fused score chain: each worker's part (`chain_parts`) in one core op."""
        graph, chain = self.graph, plan.chain
        batch, M, _ = chain_extent(graph, chain)
        busiest = {w: max((hi - lo) * chain_elements(graph, chain, r1 - r0) for lo, hi, r0, r1
                          in chain_parts(graph, chain, w)) for w in self.worker_counts}
        share = np.array([busiest[int(w)] for w in self.workers], dtype=np.float64)
        charges.core += np.ceil(share * self.params.chain_cpe)
        charges.busy += np.ceil(batch * chain_elements(graph, chain, M) * self.params.chain_cpe)
        charges.core_busy += np.ceil(batch * chain_elements(graph, chain, M) * self.params.chain_cpe)
        self.close(charges, False)

    def _generic(self, charges: Charges, plan: OpPlan):
        op = plan.op
        spec = self.graph.tensors[op.outputs[0]]
        shapes = [s.shape for s in plan.reads]
        elements = charged_elements(op, [math.prod(s) for s in shapes], math.prod(spec.shape))
        self.core_op(charges, GRAPH_OP, op, tuple(spec.shape), shapes, elements, self.params.graph_op_cpe)
        self.close(charges, False)


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
        idx = np.flatnonzero(np.array([k == choice for k in keys]))
        sub = graph_costs(graph, params.take(idx), None if chips is None else [chips[i] for i in idx])
        parts.append((idx, sub))
    out = []
    for k in range(len(graph.ops)):
        first = parts[0][1][k]
        fields = {}
        for name, value in vars(first).items():
            arr = np.empty(params.n, dtype=value.dtype)
            for idx, sub in parts:
                arr[idx] = getattr(sub[k], name)
            fields[name] = arr
        out.append(OpCost(**fields))
    return out


__all__ = ["ACTIVITY_FIELDS", "OpCost", "graph_costs"]
