"""The mapper: every legal tile of every matmul-family op, against the framework's pick.

For each matmul-family op of a graph (linear, matmul, and conv1d / conv2d as their im2col
GEMM: M = images x output positions, K = taps x input channels, N = output channels, as
the lowering runs them) the mapper evaluates every tile whose sizes divide the 16-padded
dimensions (`tile_grid`) with the analytical cost (`matmul_cost`, which applies the shared
legality rules of `check_tiles`), and reports:

- the framework toolchain's greedy tile (`framework_tiles`) and its cycles as the framework
  runs it (policy "framework": a FENCE after every MVOUT), or why it does not fit (the
  framework does not spill, so that op fails there);
- the best legal tile by the objective (policy "search"): "latency" is the fewest cycles,
  ties broken by less SRAM, then grid order (the same pick as `plan_matmuls`); "front" also
  keeps the latency/SRAM Pareto front of the legal tiles (non-dominated on (cycles,
  sram_bytes));
- the number of legal tiles, and the gap: framework cycles / best cycles.

Cycles are `matmul_cost`'s cycles of the GEMM (DMA, Ball, packing copies, a preloaded bias);
the ops around it (im2col gathers, requantize) do not depend on the tile and are left out.
Vectorised: per distinct shape (ops of the same shape share it), one `matmul_cost` call over
candidates x the whole grid, where candidates that differ only in bank count share a row
(`candidate_groups`, `ShapeSearch`), plus a one-tile call for the framework's pick.
`ShapeSearch.plan_values` gives `plan_matmuls`'s fields for either policy from the same
evaluation.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from ..mapping import Candidate, CandidateArrays, MatmulShape, check_tiles, framework_tiles, tile_grid
from ..mapping.matmul import divisors
from ..cost.matmul import MatmulCost, matmul_cost
from .tile_choice import PLAN_FIELDS, blocked_reasons
from .units import MATRIX_CONVS, MATRIX_PRODUCTS
from ..workload.graph import CHANNELS_LAST_WEIGHTS

OBJECTIVES = ("latency", "front")
PRODUCT_KINDS = MATRIX_PRODUCTS
CONV_KINDS = MATRIX_CONVS
MAPPED_KINDS = PRODUCT_KINDS + CONV_KINDS
_NEVER = np.iinfo(np.int64).max


def gemm_shape(graph, op) -> MatmulShape:
    """The GEMM an op of the matmul family runs on the matrix Ball, with the operand flags
    the cost reads (B a weight or an activation, B per batch entry, a bias), as the
    lowering (and `graph_cost`) sees them.

    A product of (..., M, K) by (..., K, N) runs batch = prod(output dims but the last two)
    GEMMs. A convolution is its im2col GEMM (`dse/lower/lower.py` `_conv`): A[M = images x
    output positions, K = taps x C] @ W[K, O], one batch (a grouped one with its
    block-diagonal W, `dse.plan.grouped`); the sizes come from the output and
    weight tensors (any layout). The op's M/N/K attrs are the fallback."""
    attrs = op.attrs
    specs = getattr(graph, "tensors", {})
    weights = getattr(graph, "weights", {})
    bias = bool(attrs.get("has_bias") and len(op.inputs) > 2)
    try:
        out = tuple(specs[op.outputs[0]].shape)
        if op.kind in CONV_KINDS:
            w_shape = tuple(specs[op.inputs[1]].shape)
            out_channels = int(w_shape[-1] if attrs.get("weight_layout", "") in CHANNELS_LAST_WEIGHTS else w_shape[0])
            # a grouped conv runs as its block-diagonal GEMM: K spans every input channel
            k = math.prod(w_shape) // out_channels * int(attrs.get("groups", 1))
            return MatmulShape(math.prod(out) // out_channels, out_channels, k, 1, b_weight=True, bias=bias)
        x_shape, w_shape = tuple(specs[op.inputs[0]].shape), tuple(specs[op.inputs[1]].shape)
        if len(x_shape) >= 2 and len(w_shape) >= 2 and len(out) >= 2:
            nb = math.prod(out[:-2])
            return MatmulShape(int(x_shape[-2]), int(out[-1]), int(x_shape[-1]), nb, b_weight=op.inputs[1] in weights,
                               b_batched=len(w_shape) > 2 and nb > 1, bias=bias)
    except (KeyError, IndexError, AttributeError, TypeError):
        pass
    return MatmulShape(int(attrs["M"]), int(attrs["N"]), int(attrs["K"]), int(attrs.get("batch", 1)), bias=bias)


@dataclass(frozen=True)
class TilePoint:
    """One tile and what it costs."""

    tm: int
    tn: int
    tk: int
    cycles: int
    sram_bytes: int
    banks: int
    dma_bytes: int

    @property
    def tile(self) -> tuple[int, int, int]:
        return self.tm, self.tn, self.tk

    def __str__(self) -> str:
        return f"{self.tm}x{self.tn}x{self.tk}"


# Figures that may differ within a group: the bank count and what follows from it (the
# private SRAM per core); names and reasons only label. `search_shape` checks that they do
# not change a tile's legality but by the bank budget (each group's legality at its smallest
# and largest member); that they do not change its cost, the tests (grouped against one by one).
_BANK_FIGURES = {"bank_count", "private_sram_per_core"}
# Figures the search never reads (`check_tiles`, `matmul_cost` and what they call read
# the addressable rows, not the physical ones, and no core-op cost but the copy's; the
# core count only blocks a candidate, which is decided per candidate): candidates that
# differ only in them share a group. A figure not named here keys the groups.
_UNREAD = {"bank_rows", "cores", "burst_max_bytes", "bursts_in_flight", "op_cycles_per_element", "mul_cpe",
           "scale_cpe", "graph_op_cpe", "relu_cpe", "chain_cpe", "fence_cycles", "barrier_cycles", "fusion",
           "channels_last", "scan_weights_kept", "parts_at_once"}
_NOT_KEY = {"n", "chip_names", "chip_index"} | _BANK_FIGURES | _UNREAD


def _with(params: CandidateArrays, **arrays) -> CandidateArrays:
    return dataclasses.replace(params, **arrays)


@dataclass
class CandidateGroups:
    """Candidates that differ at most in their bank count (and what follows from it), found
    once per candidate set and shared by every shape."""

    group: np.ndarray  # (n,) group of each candidate, 0..G-1
    lo: np.ndarray  # (G,) the member with the fewest banks
    hi: np.ndarray  # (G,) the member with the most banks
    blocked: list[str]  # (n,) why a candidate cannot run a matmul at all ("" when it can)
    usable: np.ndarray  # (n,) bool: not blocked

    @property
    def count(self) -> int:
        return len(self.hi)


def _codes(values) -> np.ndarray | None:
    """Integer codes of a per-candidate figure (None when all candidates share it)."""
    if isinstance(values, np.ndarray):
        if values.size == 0 or (values == values[0]).all():
            return None
        return np.unique(values, return_inverse=True)[1].ravel()
    if isinstance(values, list):
        distinct = {value: code for code, value in enumerate(dict.fromkeys(values))}  # formula texts, None
        if len(distinct) <= 1:
            return None
        return np.fromiter((distinct[value] for value in values), dtype=np.int64, count=len(values))
    return None


def candidate_groups(params: CandidateArrays) -> CandidateGroups:
    """Group candidates on every figure but the bank count: only the figures that vary are
    coded, and the codes combined column by column (re-coded so they stay small)."""
    n = params.n
    group = np.zeros(n, dtype=np.int64)
    for each in dataclasses.fields(params):
        if each.name in _NOT_KEY:
            continue
        codes = _codes(getattr(params, each.name))
        if codes is not None:
            group = np.unique(group * (int(codes.max()) + 1) + codes, return_inverse=True)[1].ravel()
    G = int(group.max()) + 1 if n else 0
    bank_count = params.bank_count
    order = np.lexsort((bank_count, group))
    starts = np.searchsorted(group[order], np.arange(G))
    lo, hi = order[starts], order[np.append(starts[1:], n) - 1]
    blocked = _blocked(params)
    return CandidateGroups(group, lo, hi, blocked, np.fromiter((not why for why in blocked), dtype=bool, count=n))


@dataclass
class ShapeSearch:
    """Every tile of one shape for every candidate.

    Candidates that differ only in their bank count share one evaluation of the grid (a
    group): the bank count enters only the bank budget (tiles needing more banks than the
    chip has are illegal), never a tile's cycles, so each candidate's best tile is a lookup
    in its group's tiles sorted by banks needed (a running best). `search_shape` checks
    on every call that the bank count changes a tile's legality only by the budget (each
    group's `check_tiles` at its smallest and largest bank count; `matmul_cost` reads the
    bank count nowhere else, which the tests check against one by one) and evaluates
    candidates one by one when it does not hold.
    """

    shape: MatmulShape
    params: CandidateArrays  # the candidates as given (search policy)
    tm: np.ndarray  # (T,) the grid
    tn: np.ndarray
    tk: np.ndarray
    group: np.ndarray  # (n,) the group of each candidate
    budget: np.ndarray  # (n,) banks a tile may use (the bank count; huge when unchecked)
    ok_free: np.ndarray  # (G, T) legal apart from the bank budget
    cycles_g: np.ndarray  # (G, T)
    sram_g: np.ndarray  # (G, T)
    banks_g: np.ndarray  # (G, T) banks a tile needs
    dma_bytes_g: np.ndarray  # (G, T)
    legal: np.ndarray  # (n,) legal tiles
    best: np.ndarray  # (n,) index of the best legal tile, -1 when none
    framework: np.ndarray | None  # (n,) grid index of the framework's greedy tile (None: left out)
    framework_ok: np.ndarray | None  # (n,) that tile is legal
    framework_cycles: np.ndarray | None  # (n,) its cycles as the framework runs it (FENCE after MVOUT)
    blocked: list[str]  # (n,) why the candidate cannot run a matmul at all ("" when it can)
    grouped: bool  # False when bank-count independence did not hold (one group per candidate)
    grid_cost: MatmulCost | None = field(default=None, repr=False)  # rows 0..G-1: the groups
    fw_cost: MatmulCost | None = field(default=None, repr=False)  # one tile per row
    fw_row: np.ndarray | None = field(default=None, repr=False)  # (n,) each candidate's row of fw_cost
    _reasons: dict = field(default_factory=dict, repr=False)

    @property
    def tiles(self) -> int:
        return len(self.tm)

    @property
    def groups(self) -> int:
        return len(self.cycles_g)

    def plan_values(self, policy: str = "search") -> dict[str, np.ndarray]:
        """Per candidate, the fields of `plan_matmuls` (`PLAN_FIELDS`, zero where infeasible)
        for the mapper's best tile (policy "search") or the framework's (policy
        "framework", costed with its FENCEs): what `plan_matmuls` returns, without
        evaluating every candidate x tile."""
        if policy == "search":
            cost, rows, cols, ok = self.grid_cost, self.group, np.maximum(self.best, 0), self.best >= 0
            legal = self.legal
        else:
            cost, rows, cols, ok = self.fw_cost, self.fw_row, np.zeros(len(self.group), dtype=np.int64), \
                self.framework_ok
            legal = ok.astype(np.int64)
        full = np.broadcast(cost.check.tm, cost.check.banks).shape
        out = {}
        for name in PLAN_FIELDS:
            if name == "legal_tiles":
                out[name] = np.asarray(legal, dtype=np.int64).copy()
                continue
            src = cost.check if name in ("tm", "tn", "tk", "banks") else cost
            picked = np.broadcast_to(getattr(src, name), full)[rows, cols]
            out[name] = np.where(ok, picked, 0).astype(np.int64)
        return out

    def ok(self, cand: int) -> np.ndarray:
        """(T,) legality of every tile for candidate `cand`."""
        if self.blocked[cand]:
            return np.zeros(self.tiles, dtype=bool)
        group_index = self.group[cand]
        return self.ok_free[group_index] & (self.banks_g[group_index] <= self.budget[cand])

    def cycles(self, cand: int) -> np.ndarray:
        return self.cycles_g[self.group[cand]]

    def sram_bytes(self, cand: int) -> np.ndarray:
        return self.sram_g[self.group[cand]]

    def point(self, cand: int, tile: int, cycles: int | None = None) -> TilePoint:
        group_index = self.group[cand]
        return TilePoint(int(self.tm[tile]), int(self.tn[tile]), int(self.tk[tile]),
                         int(self.cycles_g[group_index, tile] if cycles is None else cycles),
                         int(self.sram_g[group_index, tile]),
                         int(self.banks_g[group_index, tile]), int(self.dma_bytes_g[group_index, tile]))

    def reason(self, cand: int, tile: int) -> str:
        """Why `tile` is illegal for candidate `cand` (empty if legal). Members of a group with
        the same bank count share the text (it reads only figures they share)."""
        if self.blocked[cand]:
            return self.blocked[cand]
        key = (int(self.group[cand]), int(self.params.bank_count[cand]), tile) if self.grouped else (cand, tile)
        if key not in self._reasons:
            check = check_tiles(self.params.take(np.array([cand])), self.tm[tile:tile + 1], self.tn[tile:tile + 1],
                                self.tk[tile:tile + 1], self.shape)
            self._reasons[key] = check.reason(0, 0)
        return self._reasons[key]

    def no_tile_reason(self, cand: int) -> str:
        """Why candidate `cand` has no legal tile: the smallest tile's reason binds."""
        if self.blocked[cand]:
            return self.blocked[cand]
        smallest = int(np.argmin(self.tm * self.tn * self.tk))
        return f"no legal tile among {self.tiles}; smallest {self.reason(cand, smallest)}"

    def front(self, cand: int) -> list[int]:
        """Indices of candidate `cand`'s legal tiles on the latency/SRAM Pareto front (no other
        legal tile has cycles <= and SRAM <= with one of them <), by cycles then SRAM;
        tiles with an identical (cycles, SRAM) point are all kept."""
        idx = np.flatnonzero(self.ok(cand))
        if idx.size == 0:
            return []
        cyc, sram = self.cycles(cand)[idx], self.sram_bytes(cand)[idx]
        order = np.lexsort((idx, sram, cyc))
        cyc, sram, idx = cyc[order], sram[order], idx[order]
        # The SRAM floor of everything strictly faster: a point is on the front when its SRAM
        # is below it (points of equal cycles are ordered by SRAM, so only the first of a
        # cycles group can qualify, with its exact duplicates).
        prev_min = np.concatenate(([_NEVER], np.minimum.accumulate(sram)[:-1]))
        first_of_group = np.concatenate(([True], cyc[1:] != cyc[:-1]))
        group_start = np.maximum.accumulate(np.where(first_of_group, np.arange(len(cyc)), 0))
        keep = (sram < prev_min[group_start]) & (sram == sram[group_start])
        return [int(index) for index in idx[keep]]


def _blocked(params: CandidateArrays) -> list[str]:
    """Why each candidate cannot run a matmul at all ("" when it can)."""
    out = [""] * params.n
    for cand, why in blocked_reasons(params).items():
        out[cand] = why
    return out


def search_shape(params: CandidateArrays, shape: MatmulShape, group_by_banks: bool = True,
                 groups: CandidateGroups | None = None, framework: bool = True) -> ShapeSearch:
    """Every tile of `shape` for every candidate (search policy), and the framework's tile
    as the framework runs it: a `matmul_cost` call over the grid per group of candidates
    that differ only in bank count (and the legality rules at the group's other bank-count
    extreme, the independence check), plus one of a single tile per group for the framework.
    `group_by_banks=False` evaluates every candidate on its own (the reference path);
    `groups` (from `candidate_groups(params)`) saves regrouping when shapes share candidates;
    `framework=False` leaves the framework's tile out (its fields None: `plan_values("search")`
    reads none of them)."""
    n = params.n
    search = _with(params, framework=np.zeros(n, dtype=bool))
    tm, tn, tk = tile_grid(shape)
    T = len(tm)
    groups = groups or candidate_groups(params)
    group, G, blocked = groups.group, groups.count, groups.blocked
    lo_idx, hi_idx = groups.lo, groups.hi
    bank_count = params.bank_count
    hi, lo = bank_count[hi_idx], bank_count[lo_idx]
    spread = bool((lo != hi).any())
    full = (G, T)
    grouped = group_by_banks
    if grouped:
        # Each group's member with the most banks costed; the one with the fewest (the
        # independence check) through the legality rules, the one reader of the bank count
        # (`check_tiles`' bank budget: the figures' independence is the tests' to check,
        # grouped against one by one).
        pair = matmul_cost(search.take(hi_idx), shape, tm, tn, tk)
        viol = pair.check.violations
        grouped = "bank_budget" in viol
    if grouped:
        def free(check) -> np.ndarray:  # legal apart from the bank budget
            out = np.ones(full, dtype=bool)
            for name, violation in check.violations.items():
                if name != "bank_budget":
                    out &= ~np.broadcast_to(violation, full)
            return out

        ok_free, banks = free(pair.check), np.broadcast_to(pair.check.banks, full)
        grouped = bool(np.array_equal(pair.check.ok, ok_free & (banks <= hi[:, None])))
        if grouped and spread:
            low = check_tiles(search.take(lo_idx), tm, tn, tk, shape)
            grouped = (np.array_equal(free(low), ok_free) and np.array_equal(np.broadcast_to(low.banks, full), banks)
                       and np.array_equal(low.ok, ok_free & (banks <= lo[:, None])))
        if grouped:
            cycles, sram, dma_bytes = (np.broadcast_to(figure, full)
                                       for figure in (pair.cycles, pair.sram_bytes, pair.dma_bytes))
            grid_cost = pair
    if grouped:
        budget = bank_count.astype(np.int64)
    else:  # one group per candidate, legality as checked
        group, G = np.arange(n), n
        full = (G, T)
        cost = grid_cost = matmul_cost(search, shape, tm, tn, tk)
        ok_free = cost.check.ok
        cycles, sram, banks, dma_bytes = (np.broadcast_to(figure, full) for figure in (
            cost.cycles, cost.sram_bytes, cost.check.banks, cost.dma_bytes))
        budget = np.full(n, _NEVER, dtype=np.int64)
    usable = groups.usable

    # Best tile per candidate: in each group, tiles sorted by banks needed; a running best
    # (cycles, then SRAM, then grid order) over that order answers every bank budget.
    rank_order = np.lexsort((np.broadcast_to(np.arange(T), full), sram, np.where(ok_free, cycles, _NEVER)), axis=1)
    rank = np.empty(full, dtype=np.int64)
    np.put_along_axis(rank, rank_order, np.broadcast_to(np.arange(T), full), axis=1)
    rank = np.where(ok_free, rank, T)
    by_banks = np.argsort(banks, axis=1, kind="stable")
    banks_sorted = np.take_along_axis(banks, by_banks, axis=1)
    run_best = np.minimum.accumulate(np.take_along_axis(rank, by_banks, axis=1), axis=1)
    run_legal = np.cumsum(np.take_along_axis(ok_free, by_banks, axis=1), axis=1)
    # Position of each candidate's budget in its group's sorted banks: one searchsorted
    # over the groups laid end to end (offset so that groups never mix).
    span = int(max(banks_sorted.max(initial=0), 0)) + 2
    flat = (banks_sorted + np.arange(G)[:, None] * span).ravel()
    if G * span <= 4 * n:  # a table of every budget per group, then a gather
        every = (np.arange(G)[:, None] * span + np.arange(span)).ravel()
        table = (np.searchsorted(flat, every, side="right").reshape(G, span) - 1
                 - np.arange(G)[:, None] * T)
        pos = table[group, np.minimum(budget, span - 1)]  # -1: no tile within budget
    else:
        query = group * span + np.minimum(budget, span - 1)
        pos = np.searchsorted(flat, query, side="right") - 1 - group * T
    has = (pos >= 0) & usable
    posc = np.maximum(pos, 0)
    best_rank = np.where(has, run_best[group, posc], T)
    legal = np.where(has, run_legal[group, posc], 0)
    best = np.where(best_rank < T, rank_order[group, np.minimum(best_rank, T - 1)], -1)

    if not framework:
        return ShapeSearch(shape, search, tm, tn, tk, group, budget, ok_free, cycles, sram, banks, dma_bytes, legal,
                           best, None, None, None, blocked, grouped, grid_cost)
    # The framework's tile as a grid index (meshgrid "ij" order: m, then n, then k), costed
    # as the framework runs it (policy framework: a FENCE after every MVOUT).
    Mp, Np, Kp = shape.padded
    md, nd, kd = divisors(Mp), divisors(Np), divisors(Kp)

    def fw_index(cand_params: CandidateArrays) -> np.ndarray:
        ftm, ftn, ftk = (np.asarray(tiles)[:, 0] for tiles in framework_tiles(cand_params, shape))
        return (np.searchsorted(md, ftm) * len(nd) + np.searchsorted(nd, ftn)) * len(kd) + np.searchsorted(kd, ftk)

    fw_tile = None
    if grouped:  # the greedy pick reads figures a group shares: once per group, if so
        fw2 = fw_index(search.take(np.concatenate([hi_idx, lo_idx])))
        if np.array_equal(fw2[:G], fw2[G:]):
            fw_tile = fw2[:G][group]
    if fw_tile is None:
        fw_tile = fw_index(params)
    fw_ok = usable & ok_free[group, fw_tile] & (banks[group, fw_tile] <= budget)
    fw_cycles = fw_cost = None
    if grouped:  # the same tile across each group
        g_fw = np.concatenate([fw_tile[hi_idx], fw_tile[lo_idx]]) if spread else fw_tile[hi_idx]
        members = np.concatenate([hi_idx, lo_idx]) if spread else hi_idx
        fw_params = _with(search.take(members), framework=np.ones(len(members), dtype=bool))
        fw_cost = matmul_cost(fw_params, shape, tm[g_fw][:, None], tn[g_fw][:, None], tk[g_fw][:, None])
        fw_group_cycles = np.broadcast_to(fw_cost.cycles, (len(members), 1))[:, 0]
        if not spread or np.array_equal(fw_group_cycles[:G], fw_group_cycles[G:]):
            fw_cycles, fw_row = fw_group_cycles[:G][group], group
        else:
            fw_cost = None
    if fw_cost is None:
        fw_cost = matmul_cost(_with(params, framework=np.ones(n, dtype=bool)), shape, tm[fw_tile][:, None],
                              tn[fw_tile][:, None], tk[fw_tile][:, None])
        fw_cycles, fw_row = np.broadcast_to(fw_cost.cycles, (n, 1))[:, 0], np.arange(n)
    return ShapeSearch(shape, search, tm, tn, tk, group, budget, ok_free, cycles, sram, banks, dma_bytes, legal, best,
                       fw_tile, fw_ok, fw_cycles, blocked, grouped, grid_cost, fw_cost, fw_row)


@dataclass
class OpMap:
    """The mapper's answer for one op on one candidate. `framework` is the greedy tile with
    its cycles as the framework runs it (policy framework); `best` the mapper's pick (policy
    search)."""

    op: str
    kind: str
    shape: MatmulShape
    tiles: int  # the grid: tiles that divide the padded dimensions
    legal_tiles: int
    framework: TilePoint | None  # the greedy tile, also when it does not fit
    framework_feasible: bool
    framework_reason: str  # why the framework's tile does not fit ("" when it does)
    best: TilePoint | None  # None when no tile is legal
    reason: str  # why no tile is legal ("" when one is)
    front: list[TilePoint] | None = None  # objective "front" only
    # The framework's tile run the mapper's way (no FENCE after every MVOUT): separates
    # what the tile choice gains from what dropping the fences gains.
    framework_tile_search_cycles: int | None = None

    @property
    def gap(self) -> float | None:
        """Framework cycles / best cycles (None unless both are feasible)."""
        if not self.framework_feasible or self.best is None:
            return None
        return self.framework.cycles / self.best.cycles if self.best.cycles else 1.0

    def to_dict(self) -> dict:
        shape = self.shape
        out = {"op": self.op, "kind": self.kind, "M": shape.M, "N": shape.N, "K": shape.K, "batch": shape.batch,
               "tiles": self.tiles, "legal_tiles": self.legal_tiles,
               "framework": asdict(self.framework) if self.framework else None,
               "framework_feasible": self.framework_feasible, "framework_reason": self.framework_reason,
               "framework_tile_search_cycles": self.framework_tile_search_cycles,
               "best": asdict(self.best) if self.best else None, "reason": self.reason, "gap": self.gap}
        if self.front is not None:
            out["front"] = [asdict(point) for point in self.front]
        return out


@dataclass
class GraphMap:
    """The mapper's answer for a graph on one candidate."""

    graph: str
    chip: str
    mapping: dict
    objective: str
    ops: list[OpMap]
    distinct_shapes: int
    tiles_evaluated: int  # tiles over the distinct shapes (each evaluated once)
    seconds: float  # wall time of the mapping itself (not the graph's capture)

    @property
    def framework_infeasible(self) -> list[str]:
        return [op_map.op for op_map in self.ops if not op_map.framework_feasible]

    @property
    def unmappable(self) -> list[str]:
        return [op_map.op for op_map in self.ops if op_map.best is None]

    @property
    def framework_cycles(self) -> int | None:
        """Sum over the matmul-family ops of the framework tile's cycles; None when the
        framework fails on any of them."""
        if self.framework_infeasible:
            return None
        return sum(op_map.framework.cycles for op_map in self.ops)

    @property
    def best_cycles(self) -> int | None:
        if self.unmappable:
            return None
        return sum(op_map.best.cycles for op_map in self.ops)

    @property
    def gap(self) -> float | None:
        framework, best = self.framework_cycles, self.best_cycles
        if framework is None or best is None:
            return None
        return framework / best if best else 1.0

    def to_dict(self) -> dict:
        return {"graph": self.graph, "chip": self.chip, "mapping": self.mapping, "objective": self.objective,
                "ops": [op_map.to_dict() for op_map in self.ops],
                "totals": {"ops": len(self.ops), "distinct_shapes": self.distinct_shapes,
                           "tiles_evaluated": self.tiles_evaluated,
                           "framework_cycles": self.framework_cycles, "best_cycles": self.best_cycles,
                           "gap": self.gap, "framework_infeasible": self.framework_infeasible,
                           "unmappable": self.unmappable},
                "mapper_seconds": self.seconds}


def _op_map(op, shape: MatmulShape, search: ShapeSearch, cand: int, objective: str) -> OpMap:
    fw_tile = int(search.framework[cand])
    fw_ok = bool(search.framework_ok[cand])
    fw_reason = "" if fw_ok else f"the framework's greedy tile does not fit; {search.reason(cand, fw_tile)}"
    best_tile = int(search.best[cand])
    best = search.point(cand, best_tile) if best_tile >= 0 else None
    front = None
    if objective == "front":
        front = [search.point(cand, tile) for tile in search.front(cand)]
    framework = search.point(cand, fw_tile, int(search.framework_cycles[cand]))
    return OpMap(op.name, op.kind, shape, search.tiles, int(search.legal[cand]), framework, fw_ok, fw_reason, best,
                 "" if best is not None else search.no_tile_reason(cand), front, int(search.cycles(cand)[fw_tile]))


def map_graph_candidates(graph, candidates: Sequence[Candidate], objective: str = "latency") -> list[GraphMap]:
    """Map every matmul-family op of `graph` for each candidate (all candidates evaluated
    together, one `matmul_cost` call per distinct shape)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r}: one of {', '.join(OBJECTIVES)}")
    started = time.perf_counter()
    params = CandidateArrays.from_candidates(candidates)
    ops = [op for op in graph.ops if op.kind in MAPPED_KINDS]
    shapes = [gemm_shape(graph, op) for op in ops]
    groups = candidate_groups(params)
    cache: dict[MatmulShape, ShapeSearch] = {}
    for shape in shapes:
        if shape not in cache:
            cache[shape] = search_shape(params, shape, groups=groups)
    per_candidate = [[_op_map(op, shape, cache[shape], cand_index, objective) for op, shape in zip(ops, shapes)]
                     for cand_index in range(params.n)]
    seconds = time.perf_counter() - started
    tiles = sum(search.tiles for search in cache.values())
    return [GraphMap(graph.name, cand.chip.name, cand.mapping.model_dump(mode="json"), objective, op_maps,
                     len(cache), tiles, seconds) for cand, op_maps in zip(candidates, per_candidate)]


def map_graph(graph, candidate: Candidate, objective: str = "latency") -> GraphMap:
    """Map every matmul-family op of `graph` onto one candidate (chip + mapping choices)."""
    return map_graph_candidates(graph, [candidate], objective)[0]


__all__ = ["MAPPED_KINDS", "OBJECTIVES", "CandidateGroups", "GraphMap", "OpMap", "ShapeSearch", "TilePoint",
           "candidate_groups", "gemm_shape", "map_graph", "map_graph_candidates", "search_shape"]
