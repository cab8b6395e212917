"""Matmul tiles on the matrix Ball: which are legal, and which the framework picks.

One implementation of legality, shared by the analytical model and (later) the lowering:
SRAM depth, bank budget and instruction-field limits are separate constraints, and a tile
that breaks any of them is rejected with a reason naming the constraint and the numbers.
Everything broadcasts: candidates along axis 0 (figures from `CandidateArrays`), tiles
along axis 1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .params import CandidateArrays

PAD = 16  # the framework pads every matmul dimension to 16 (the array width)
INT8_BYTES, INT32_BYTES = 1, 4


@dataclass(frozen=True)
class MatmulShape:
    M: int
    N: int
    K: int
    batch: int = 1
    # How the lowering feeds the operands (they change the cost, not legality): B an offline
    # weight (pre-blocked) or an activation (packed by a core copy), B one per batch entry,
    # a bias preloaded into the accumulator.
    b_weight: bool = True
    b_batched: bool = False
    bias: bool = False
    # A handed off through the tile's shared memory by the cores of the range before
    # (`dse.plan.placement.handoffs`) in this many sets of banks (0: not; 1; 2 when requests
    # overlap, a set each): where the tile keeps the whole reduction (Kt = 1) and every set
    # fits the shared banks B leaves, A is read there (one shared bank a tile).
    a_shared: int = 0
    # Shared banks, counted down from the top, that the A tiles other hand-offs live at once
    # picked take first (`dse.plan.placement.handoff_banks`: a pipeline's boundaries each have
    # their own).
    a_shared_base: int = 0
    # A shared weight loaded with the whole stack's before the op (spans with weights =
    # shared, `dse.plan.spans.shared_stack`): its B tiles sit in shared banks from
    # `b_shared_base` up (the stack's earlier weights hold the banks below), blocked as
    # `b_tile` = (tn, tk) so every worker's span reads one copy, and no load or sync of its own.
    b_preloaded: bool = False
    b_shared_base: int = 0
    b_tile: tuple[int, int] | None = None
    # B read from the tile's shared memory whatever `mapping.weights` says: a scan's recurrent
    # weight kept there across its steps (`dse.plan.scan.weight_residency`)
    b_shared: bool = False

    @property
    def padded(self) -> tuple[int, int, int]:
        return tuple(-(-d // PAD) * PAD for d in (self.M, self.N, self.K))  # type: ignore[return-value]

    def __str__(self) -> str:
        prefix = f"{self.batch}x" if self.batch > 1 else ""
        return f"{prefix}M={self.M} N={self.N} K={self.K}"


def divisors(n: int, step: int = PAD) -> np.ndarray:
    """Multiples of `step` that divide `n` (n itself a multiple of step): legal tile sizes."""
    d = np.arange(step, n + 1, step, dtype=np.int64)
    return d[n % d == 0]


def tile_grid(shape: MatmulShape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (tm, tn, tk) whose sizes divide the padded dimensions: no truncated tiles."""
    Mp, Np, Kp = shape.padded
    tm, tn, tk = np.meshgrid(divisors(Mp), divisors(Np), divisors(Kp), indexing="ij")
    return tm.ravel(), tn.ravel(), tk.ravel()


@dataclass
class TileCheck:
    """Legality of tiles for candidates (arrays shaped candidates x tiles)."""

    tm: np.ndarray
    tn: np.ndarray
    tk: np.ndarray
    lines_a: np.ndarray  # bank rows of the A tile (int8)
    lines_b: np.ndarray
    lines_c: np.ndarray  # accumulator rows (int32, acc_col-wide rows)
    col_a: np.ndarray  # physical banks per buffer of each operand
    col_b: np.ndarray
    col_c: np.ndarray
    buffers: np.ndarray
    banks: np.ndarray  # physical banks needed, buffers included
    # B read from the tile's shared memory (mapping.weights = "shared" and B a weight):
    # no private B buffers; `shared_tiles` B tiles, one shared bank each
    shared_b: np.ndarray
    shared_tiles: np.ndarray
    violations: dict[str, np.ndarray]  # constraint -> True where broken
    params: CandidateArrays
    # A read from the tile's shared memory (`MatmulShape.a_shared`, where it fits): no private
    # A buffers; `shared_a_tiles` A tiles, one shared bank each, counted down from the top bank
    shared_a: np.ndarray | None = None
    shared_a_tiles: np.ndarray | None = None
    # shared banks below B's that the stack's earlier weights hold (`MatmulShape.b_shared_base`)
    shared_base: int = 0

    @functools.cached_property
    def ok(self) -> np.ndarray:
        bad = np.zeros(np.broadcast(self.tm, self.banks).shape, dtype=bool)
        for v in self.violations.values():
            bad |= v
        return ~bad

    def reason(self, c: int, t: int) -> str:
        """Why tile t is illegal for candidate c (empty if it is legal)."""
        return self.reasons(np.array([c]), np.array([t]))[0]

    def reasons(self, cs: np.ndarray, ts: np.ndarray) -> list[str]:
        """`reason` for each pair (cs[i], ts[i]), formatted once per distinct set of figures
        (a sweep's infeasible candidates mostly fail alike)."""
        cs, ts = np.asarray(cs, dtype=np.int64), np.asarray(ts, dtype=np.int64)
        if cs.size == 0:
            return []
        shape = self.ok.shape
        flat = np.ravel_multi_index((cs, ts), shape)

        def at(a):  # a broadcast against (candidates, tiles), at the pairs
            return np.broadcast_to(a, shape).ravel()[flat].astype(np.int64)

        p = self.params
        v = self.violations
        figures = np.stack([
            at(v["matrix_dim_field"]), at(v["max_col"]), at(v["bank_budget"]), at(v["virtual_ids"]),
            at(v["shared_memory"]), at(v["shared_capacity"]), at(v["b_tile"]),
            at(self.tm), at(self.tn), at(self.tk), at(self.col_a), at(self.col_b), at(self.col_c), at(self.banks),
            at(self.buffers), at(self.shared_b), at(self.shared_tiles), p.dim_bits[cs], p.dim_max[cs], p.max_col[cs],
            p.usable_rows[cs], p.bank_count[cs], p.virtual_ids[cs], p.shared_banks[cs],
            p.shared_rows[cs] * p.shared_row_bytes[cs], np.full(cs.size, self.shared_base)], axis=1)
        names = np.array(p.chip_names, dtype=object)[cs]
        texts: dict[tuple, str] = {}
        out = []
        for row, chip in zip(map(tuple, figures.tolist()), names):  # a dict, not a sort: most rows repeat
            text = texts.get((row, chip))
            if text is None:
                text = texts[row, chip] = self._text(*row, chip)
            out.append(text)
        return out

    @staticmethod
    def _text(dim, col, budget, ids, no_shared, shared_full, other_blocking, tm, tn, tk, col_a, col_b, col_c, banks, buffers,
              shared_b, shared_tiles, dim_bits, dim_max, max_col, usable_rows, bank_count, virtual_ids, shared_banks,
              shared_bank_bytes, shared_base, chip) -> str:
        parts = []
        if no_shared:
            parts.append(f"mapping.weights = shared needs shared memory; chip {chip} has none "
                         "(shared_memory.enabled = false)")
        if shared_full:
            above = f" above the {shared_base} the stack's earlier weights hold" if shared_base else ""
            parts.append(f"the weight's {shared_tiles} B tiles of {tn * tk} bytes need {shared_tiles} shared banks "
                         f"of >= {tn * tk} bytes{above}; shared memory has {shared_banks} of {shared_bank_bytes}")
        if other_blocking:
            parts.append("the stack's shared copy of B is blocked otherwise")
        if dim:
            parts.append(f"matrix M/N/K field ({dim_bits} bits) allows <= {dim_max}, tile needs {max(tm, tn, tk)}")
        if col:
            parts.append(f"a virtual bank spans at most {max_col} banks, tile needs {max(col_a, col_b, col_c)}")
        if budget:
            b_part = "B in shared memory" if shared_b else f"B {col_b}"
            parts.append(f"bank budget: needs {banks} banks of {usable_rows} usable rows "
                         f"({buffers}x(A {col_a} + {b_part} + C {col_c})), chip has {bank_count}")
        if ids:
            parts.append(f"needs {(2 if shared_b else 3) * buffers} virtual bank ids, chip has {virtual_ids}")
        return f"tile {tm}x{tn}x{tk}: " + "; ".join(parts) if parts else ""


def check_tiles(params: CandidateArrays, tm, tn, tk, shape: MatmulShape | None = None) -> TileCheck:
    """Legality of tiles (rows of length T, or one tile per candidate as a column) for every
    candidate in `params`. With `shape` (a weight B) and ``mapping.weights = "shared"``, B
    takes no private banks but one shared bank per B tile (a transfer starts at row 0 of its
    bank, so one tile a bank): the chip needs shared memory with that many banks, each
    holding a tile."""
    tm, tn, tk = (np.asarray(x, dtype=np.int64) for x in (tm, tn, tk))
    if tm.ndim == 1:
        tm, tn, tk = tm[None, :], tn[None, :], tk[None, :]
    col = params.column
    rows = col("usable_rows")
    lines_a = tm * tk * INT8_BYTES // col("row_bytes")
    lines_b = tk * tn * INT8_BYTES // col("row_bytes")
    lines_c = -(-(tm * tn * INT32_BYTES) // (col("acc_col") * col("row_bytes")))
    # A virtual bank spreads its rows over `col` physical banks (DMA beat i -> bank i mod col).
    col_a = -(-lines_a // rows)
    col_b = -(-lines_b // rows)
    col_c = col("acc_col") * -(-lines_c // rows)
    buffers = np.where(col("double_buffer"), 2, 1)
    shared_b = (col("shared_weights") | bool(shape is not None and shape.b_shared)) & bool(
        shape is not None and shape.b_weight)
    if shape is not None:
        Mp, Np, Kp = shape.padded
        shared_tiles = np.where(shared_b, (shape.batch if shape.b_batched else 1) * (Np // tn) * (Kp // tk), 0)
    else:
        shared_tiles = np.zeros_like(shared_b, dtype=np.int64)
    if shape is not None and shape.a_shared:
        # not a constraint: where A does not fit there, it is loaded into private banks as usual
        a_tiles = shape.batch * (Mp // tm) * shape.a_shared
        shared_a = (col("shared_enabled") & (Kp // tk == 1)
                    & (shape.a_shared_base + a_tiles + shared_tiles <= col("shared_banks"))
                    & (tm * tk <= col("shared_rows") * col("shared_row_bytes")))
        shared_a_tiles = np.where(shared_a, a_tiles, 0)
    else:
        shared_a = np.zeros(np.broadcast(tm, col("shared_banks")).shape, dtype=bool)
        shared_a_tiles = np.zeros_like(shared_a, dtype=np.int64)
    need = buffers * (np.where(shared_a, 0, col_a) + np.where(shared_b, 0, col_b) + col_c)
    shape_base = shape.b_shared_base if shape is not None else 0
    dim_max = col("dim_max")
    full = np.broadcast(need, shared_tiles).shape
    violations = {
        "matrix_dim_field": (tm > dim_max) | (tn > dim_max) | (tk > dim_max),
        "max_col": np.maximum(np.maximum(np.where(shared_a, 0, col_a), np.where(shared_b, 0, col_b)), col_c)
        > col("max_col"),
        "bank_budget": need > col("bank_count"),
        "virtual_ids": np.broadcast_to((3 - shared_b.astype(np.int64) - shared_a) * buffers > col("virtual_ids"),
                                       need.shape),
        "shared_memory": np.broadcast_to(shared_b & ~col("shared_enabled"), full),
        "shared_capacity": shared_b & col("shared_enabled") & (
            (shape_base + shared_tiles > col("shared_banks"))
            | (tn * tk > col("shared_rows") * col("shared_row_bytes"))),
        # B read from a copy blocked once for every span (`MatmulShape.b_tile`): its tile sizes only
        "b_tile": np.broadcast_to(np.zeros((), dtype=bool) if shape is None or shape.b_tile is None
                                  else (tn != shape.b_tile[0]) | (tk != shape.b_tile[1]), full),
    }
    return TileCheck(tm, tn, tk, lines_a, lines_b, lines_c, col_a, col_b, col_c, buffers, need, shared_b,
                     np.broadcast_to(shared_tiles, full), violations, params, np.broadcast_to(shared_a, need.shape),
                     np.broadcast_to(shared_a_tiles, need.shape), shape_base)


# `mapping.double_buffer` as `dse map --buffering` names it, and what each choice assumes
# (`check_tiles` counts the buffers: one rule for the map, the plan and the sweep).
BUFFERING = {"single": False, "double": True}


def buffering_assumption(double_buffer: bool) -> str:
    """The buffering a tile's bank count assumes, in words (`dse map` prints it)."""
    if double_buffer:
        return ("double buffering: 2 buffers per operand (A, B, C), so the DMA of the next tile overlaps "
                "this one's compute; a tile needs 2x(A + B + C) banks")
    return ("single buffering: 1 buffer per operand (A, B, C), so DMA and compute alternate; a tile needs "
            "A + B + C banks")


def framework_tiles(params: CandidateArrays, shape: MatmulShape) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The framework toolchain's greedy pick per candidate: K first, then N, then M
    (HARDWARE.md), as columns (candidates x 1).

    A and B tiles are capped at one bank of DMA lines and C at a quarter of that in
    accumulator lines (1024 and 256 on the default 1024-row bank). A 512^3 int8 matmul gets
    32 x 32 x 512. The pick ignores the bank count: if it does not fit, the mapping fails,
    as it does in the framework (no spilling).
    """
    Mp, Np, Kp = shape.padded
    limit_ab = params.column("usable_rows")
    limit_c = limit_ab // 4
    line = params.column("row_bytes")

    def largest(cands: np.ndarray, fits: np.ndarray) -> np.ndarray:
        best = np.where(fits, cands[None, :], 0).max(axis=1, keepdims=True)
        return np.where(best > 0, best, PAD)

    kd, nd, md = divisors(Kp), divisors(Np), divisors(Mp)
    tk = largest(kd, PAD * kd[None, :] // line <= limit_ab)
    tn = largest(nd, tk * nd[None, :] // line <= limit_ab)
    tm = largest(md, (md[None, :] * tk // line <= limit_ab) & (md[None, :] * tn // PAD <= limit_c))
    return tm, tn, tk
