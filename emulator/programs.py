"""Example programs: a tiled int8 matmul, as the framework's toolchain would emit it.

``C[M, N] (int32) = A[M, K] (int8) @ B[K, N] (int8)``, with ``B`` stored transposed
(``Bt``, N x K, the layout of a Linear weight). Output tiles are dealt to cores
round-robin by tile row; per output tile the reduction runs over K tiles with A and B
double-buffered, accumulating in a col-4 accumulator bank, then ``MVOUT`` (and, as the
framework's toolchain does, a ``FENCE``).

DRAM layouts:

* ``"blocked"``: A and Bt are stored tile by tile (``A[mi, ki]`` a contiguous tm x tk
  block, as an offline permute step would leave them): every tile load is one contiguous
  transfer. Use :func:`blocked` to lay a matrix out so.
* ``"rowmajor"``: A and Bt are plain row-major; a tile load uses a bank of ``tk / 16``
  columns and a DRAM row stride of K (one burst a tile row).

C is row-major M x N int32 in both.
"""

from __future__ import annotations

import numpy as np

from .isa import Fence, Matmul, Mset, Mvin, Mvout
from .program import Program, Region


def blocked(x: np.ndarray, t0: int, t1: int) -> np.ndarray:
    """(R, S) -> (R/t0, S/t1, t0, t1): each tile contiguous."""
    R, S = x.shape
    return np.ascontiguousarray(x.reshape(R // t0, t0, S // t1, t1).transpose(0, 2, 1, 3))


def tiled_matmul(M: int, N: int, K: int, tm: int, tn: int, tk: int, *, cores: int = 1, layout: str = "blocked",
                 dataflow: str = "ws", fence_after_mvout: bool = True, acc_col: int = 4) -> Program:
    for name, d, t in (("M", M, tm), ("N", N, tn), ("K", K, tk)):
        if d % t or t % 16:
            raise ValueError(f"{name}={d} must be a multiple of its tile {t}, itself a multiple of 16")
    if layout not in ("blocked", "rowmajor"):
        raise ValueError(f"layout must be 'blocked' or 'rowmajor', got {layout!r}")
    Mt, Nt, Kt = M // tm, N // tn, K // tk
    a_addr, b_addr = 0, M * K
    c_addr = b_addr + N * K
    c_addr = -(-c_addr // 64) * 64
    if layout == "blocked":
        inputs = {"A": Region(a_addr, (Mt, Kt, tm, tk), "int8"), "B": Region(b_addr, (Nt, Kt, tn, tk), "int8")}
        ab_col, ab_stride = 1, 0
    else:
        inputs = {"A": Region(a_addr, (M, K), "int8"), "B": Region(b_addr, (N, K), "int8")}
        ab_col, ab_stride = tk // 16, K
    outputs = {"C": Region(c_addr, (M, N), "int32")}
    c_col = acc_col * tn // 16
    lines_a, lines_b = tm * tk // 16, tn * tk // 16
    lines_c = tm * tn * 4 // 16

    def a_tile(mi, ki):
        if layout == "blocked":
            return a_addr + (mi * Kt + ki) * tm * tk
        return a_addr + mi * tm * K + ki * tk

    def b_tile(ni, ki):
        if layout == "blocked":
            return b_addr + (ni * Kt + ki) * tn * tk
        return b_addr + ni * tn * K + ki * tk

    def build(core: int):
        A, B_, C = (0, 1), (2, 3), 4
        prog = [Mset(A[0], ab_col), Mset(A[1], ab_col), Mset(B_[0], ab_col), Mset(B_[1], ab_col), Mset(C, c_col)]
        buf = 0
        for mi in range(core, Mt, cores):
            for ni in range(Nt):
                for ki in range(Kt):
                    prog.append(Mvin(A[buf], a_tile(mi, ki), lines_a, ab_stride))
                    prog.append(Mvin(B_[buf], b_tile(ni, ki), lines_b, ab_stride))
                    prog.append(Matmul(A[buf], B_[buf], C, tm, tn, tk, dataflow=dataflow, accumulate=ki > 0))
                    buf ^= 1
                prog.append(Mvout(C, c_addr + (mi * tm * N + ni * tn) * 4, lines_c, N * 4))
                if fence_after_mvout:
                    prog.append(Fence())
        prog += [Mset(b, alloc=False) for b in (*A, *B_, C)]
        return prog

    return Program.spmd(build, cores, inputs=inputs, outputs=outputs,
                        name=f"matmul {M}x{N}x{K} tiles {tm}x{tn}x{tk} on {cores} cores ({layout})")


def matmul_inputs(M: int, N: int, K: int, tm: int, tn: int, tk: int, layout: str = "blocked", seed: int = 0):
    """Random A (M x K) and Bt (N x K) int8, and the DRAM values for :func:`tiled_matmul`."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (M, K), dtype=np.int8)
    bt = rng.integers(-128, 128, (N, K), dtype=np.int8)
    if layout == "blocked":
        return a, bt, {"A": blocked(a, tm, tk), "B": blocked(bt, tn, tk)}
    return a, bt, {"A": a, "B": bt}
