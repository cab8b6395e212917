"""Matmul tiles on the matrix Ball: which are legal, which the framework picks, which is best.

One implementation of legality, shared by the analytical model and (later) the lowering:
SRAM depth, bank budget and instruction-field limits are separate constraints, and a tile
that breaks any of them is rejected with a reason naming the constraint and the numbers.
Everything is vectorised over arrays of tiles.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.chip import ChipConfig

from .candidate import Mapping

PAD = 16  # the framework pads every matmul dimension to 16 (the array width)
INT8_BYTES, INT32_BYTES = 1, 4


@dataclass(frozen=True)
class MatmulShape:
    M: int
    N: int
    K: int
    batch: int = 1

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
    """Legality of arrays of tiles, with the footprint each needs."""

    tm: np.ndarray
    tn: np.ndarray
    tk: np.ndarray
    lines_a: np.ndarray  # bank rows of the A tile (int8, 16-byte rows)
    lines_b: np.ndarray
    lines_c: np.ndarray  # accumulator rows (int32, acc_col-wide rows)
    banks: np.ndarray  # physical banks needed, buffers included
    violations: dict[str, np.ndarray]  # constraint name -> bool array (True = broken)
    messages: dict[str, np.ndarray]  # constraint name -> per-tile message parts

    @property
    def ok(self) -> np.ndarray:
        bad = np.zeros(self.tm.shape, dtype=bool)
        for v in self.violations.values():
            bad |= v
        return ~bad

    def reason(self, i: int) -> str:
        """Why tile i is illegal (empty if it is legal)."""
        tile = f"tile {self.tm[i]}x{self.tn[i]}x{self.tk[i]}"
        broken = [str(self.messages[name][i]) for name, v in self.violations.items() if v[i]]
        return f"{tile}: " + "; ".join(broken) if broken else ""


def usable_rows(chip: ChipConfig) -> int:
    """Rows an instruction can address: SRAM depth capped by the row-address field."""
    return min(chip.banks.rows, 1 << chip.isa.row_addr_bits)


def check_tiles(chip: ChipConfig, mapping: Mapping, tm, tn, tk) -> TileCheck:
    tm, tn, tk = (np.asarray(x, dtype=np.int64) for x in (tm, tn, tk))
    banks, isa = chip.banks, chip.isa
    rows = usable_rows(chip)
    lines_a = tm * tk * INT8_BYTES // banks.row_bytes
    lines_b = tk * tn * INT8_BYTES // banks.row_bytes
    acc_row_bytes = banks.acc_col * banks.row_bytes
    lines_c = -(-(tm * tn * INT32_BYTES) // acc_row_bytes)
    # A virtual bank spreads its rows over `col` physical banks (DMA beat i -> bank i mod col).
    col_a = -(-lines_a // rows)
    col_b = -(-lines_b // rows)
    col_c = banks.acc_col * -(-lines_c // rows)
    buffers = 2 if mapping.double_buffer else 1
    need = buffers * (col_a + col_b + col_c)
    dim_max = isa.max_value("matrix_dim")
    virtual_needed = 3 * buffers

    violations = {
        "matrix_dim_field": (tm > dim_max) | (tn > dim_max) | (tk > dim_max),
        "max_col": np.maximum(np.maximum(col_a, col_b), col_c) > banks.max_col,
        "bank_budget": need > banks.count,
        "virtual_ids": np.full(tm.shape, virtual_needed > banks.virtual_ids),
    }
    messages = {
        "matrix_dim_field": np.char.add(
            f"matrix M/N/K field ({isa.matrix_dim_bits} bits) allows <= {dim_max}, tile needs ",
            np.maximum(np.maximum(tm, tn), tk).astype(str)),
        "max_col": np.char.add(
            f"a virtual bank spans at most {banks.max_col} banks, tile needs ",
            np.maximum(np.maximum(col_a, col_b), col_c).astype(str)),
        "bank_budget": _budget_messages(buffers, col_a, col_b, col_c, need, banks.count, rows),
        "virtual_ids": np.full(tm.shape, f"needs {virtual_needed} virtual bank ids, chip has {banks.virtual_ids}"),
    }
    return TileCheck(tm, tn, tk, lines_a, lines_b, lines_c, need, violations, messages)


def _budget_messages(buffers, col_a, col_b, col_c, need, have, rows) -> np.ndarray:
    parts = [f"bank budget: needs ", need.astype(str), f" banks of {rows} usable rows (",
             f"{buffers}x(A ", col_a.astype(str), " + B ", col_b.astype(str), " + C ", col_c.astype(str),
             f")), chip has {have}"]
    out = np.asarray(parts[0])
    for p in parts[1:]:
        out = np.char.add(out, p)
    return out


@dataclass(frozen=True)
class TileChoice:
    tm: int
    tn: int
    tk: int
    banks: int


def framework_tile(chip: ChipConfig, shape: MatmulShape) -> tuple[int, int, int]:
    """The framework toolchain's greedy pick: K first, then N, then M (HARDWARE.md).

    A and B tiles are capped at one bank of DMA lines and C at a quarter of that in
    accumulator lines (1024 and 256 on the default 1024-row bank). A 512^3 int8 matmul gets
    32 x 32 x 512. The pick ignores the bank count: if it does not fit, the mapping fails,
    as it does in the framework (no spilling).
    """
    Mp, Np, Kp = shape.padded
    rows = usable_rows(chip)
    line = chip.banks.row_bytes
    limit_ab, limit_c = rows, rows // 4

    def largest(cands: np.ndarray, fits) -> int:
        ok = cands[fits(cands)]
        return int(ok.max()) if ok.size else PAD

    tk = largest(divisors(Kp), lambda k: PAD * k // line <= limit_ab)
    tn = largest(divisors(Np), lambda n: tk * n // line <= limit_ab)
    tm = largest(divisors(Mp), lambda m: (m * tk // line <= limit_ab) & (m * tn // PAD <= limit_c))
    return tm, tn, tk
