"""Bit-exact arithmetic of every Ball, as whole-array numpy operations.

These functions take and return plain arrays (operands already read out of the banks);
:mod:`emulator.machine` moves the bytes. The exact semantics (layouts, rounding,
saturation) are stated in :mod:`emulator.isa`; in short:

* integer products are exact and accumulate in int32 with two's-complement wraparound;
* fp32 scaling is an IEEE fp32 multiply (round to nearest even);
* float -> integer rounds half to even, saturates, and maps NaN to 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

_I32_MIN, _I32_MAX = -(2 ** 31), 2 ** 31 - 1


# int8 x int8 products are at most 2**14 in magnitude: a float32 sum of up to this many of
# them (any order) stays below 2**24, where every integer is a float32.
FP32_EXACT_TERMS = 1024


def int_product(a: np.ndarray, b_t: np.ndarray) -> np.ndarray:
    """``a @ b_t.T`` for int8 ``a`` (M x K) and ``b_t`` (N x K), exact, as int32 (wrapped
    to 32 bits when K is long enough to overflow: the matrix Ball's accumulator)."""
    return int_product_of_pieces([a], [b_t])


def int_product_of_pieces(a_pieces: list[np.ndarray], b_pieces: list[np.ndarray]) -> np.ndarray:
    """``[A1 .. An] @ [B1 .. Bn].T`` for int8 pieces ``Ai`` (M x Ki) and ``Bi`` (N x Ki),
    exact, wrapped to int32 (two's complement), without joining the pieces as int8.

    One float32 BLAS product per slice of at most `FP32_EXACT_TERMS` terms (exact: every
    partial sum stays below 2**24), the slices summed in int32, which wraps as the matrix
    Ball's accumulator does: the bits of the exact sum mod 2**32. float32 rather than one
    float64 product: half the bytes to convert and twice the BLAS rate, measured 1.5x faster
    on the Llama layer's 128 x 128 x 4096 chains (the functional pass runs BLAS on one
    thread, `emulator.machine.Machine.run`, so many calls cost no thread wake-ups).
    """
    acc = None
    for a, b in _term_slices(a_pieces, b_pieces, FP32_EXACT_TERMS):
        p = np.matmul(a, b.T).astype(np.int32)
        if acc is None:
            acc = p
        else:
            np.add(acc, p, out=acc)  # int32 + int32 wraps
    return acc


def _term_slices(a_pieces: list[np.ndarray], b_pieces: list[np.ndarray], terms: int):
    """The pieces' columns (the K terms), in order, as float32 pairs (A slice, B slice) of at
    most `terms` columns each: whole pieces joined while they fit, a longer piece cut."""
    group: list[tuple[np.ndarray, np.ndarray]] = []
    width = 0
    for a, b in zip(a_pieces, b_pieces):
        start = 0
        while start < a.shape[1]:
            take = min(a.shape[1] - start, terms - width)
            group.append((a[:, start:start + take], b[:, start:start + take]))
            width += take
            start += take
            if width == terms:
                yield _joined(group)
                group, width = [], 0
    if group:
        yield _joined(group)


def _joined(group: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    if len(group) == 1:
        return group[0][0].astype(np.float32), group[0][1].astype(np.float32)
    return (np.concatenate([a for a, _ in group], axis=1, dtype=np.float32),
            np.concatenate([b for _, b in group], axis=1, dtype=np.float32))


def matmul(a: np.ndarray, b_t: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """Matrix Ball: ``(c or 0) + a @ b_t.T`` in int32 with wraparound."""
    p = int_product(a, b_t)
    if c is None:
        return p
    with np.errstate(over="ignore"):
        return c + p  # int32 + int32 wraps


def vecmatmul(x: np.ndarray, y: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """Vec matmul Ball: ``(c or 0) + x.T @ y`` for int8 ``x``, ``y`` of K x 16."""
    return matmul(np.ascontiguousarray(x.T), np.ascontiguousarray(y.T), c)


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), x.dtype))


def transpose_blocks(x: np.ndarray) -> np.ndarray:
    """Transpose each E x E block of ``x`` (shape (blocks * E, E))."""
    e = x.shape[1]
    return x.reshape(-1, e, e).transpose(0, 2, 1).reshape(-1, e)


def round_saturate(y: np.ndarray, bits: int) -> np.ndarray:
    """Round half to even, saturate to a signed `bits`-bit integer, NaN -> 0."""
    lo, hi = (-128, 127) if bits == 8 else (_I32_MIN, _I32_MAX)
    r = np.rint(y.astype(np.float64))
    r = np.clip(r, lo, hi)
    r[np.isnan(r)] = 0.0
    return r.astype(np.int8 if bits == 8 else np.int32)


def fp2int(x: np.ndarray, scale: float, out_bits: int) -> np.ndarray:
    """Fp2Int Ball: fp32 ``x * scale`` (fp32 product), then round half to even, saturate."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(np.float32) * np.float32(scale)
    return round_saturate(y, out_bits)


def int2fp(x: np.ndarray, scale: float, out_bits: int) -> np.ndarray:
    """Int2Fp Ball: ``fp32(x) * scale`` in fp32; out_bits 8 requantizes to int8."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(np.float32) * np.float32(scale)
    return y if out_bits == 32 else round_saturate(y, 8)


# E2M1 magnitudes by the low three bits; bit 3 is the sign.
FP4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_decode(payload: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Exact float64 values of MXFP4 blocks: payload (blocks, 16) uint8, scales (blocks,) uint8."""
    nib = np.empty((payload.shape[0], 32), dtype=np.uint8)
    nib[:, 0::2] = payload & 0x0F
    nib[:, 1::2] = payload >> 4
    e = scales.astype(np.float64)
    mult = np.where(scales == 0xFF, np.nan, np.exp2(e - 127.0))
    return FP4_VALUES[nib] * mult[:, None]


def mxfp2int(payload: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Mxfp2Int Ball: (blocks, 32) int8, rounded half to even, saturated, NaN scale -> 0."""
    return round_saturate(mxfp4_decode(payload, scales), 8)


def im2col(image: np.ndarray, kernel: int, stride: int, pad: int, width: int) -> np.ndarray:
    """Im2col Ball: rows of patches of a square int8 image, zero padded to `width` columns."""
    xp = np.pad(image, pad) if pad else image
    win = np.lib.stride_tricks.sliding_window_view(xp, (kernel, kernel))[::stride, ::stride]
    out = win.shape[0]
    rows = win.reshape(out * out, kernel * kernel)
    res = np.zeros((out * out, width), dtype=image.dtype)
    res[:, :kernel * kernel] = rows
    return res


def systolic_cycles(M, N, K, rows, cols, dataflow: str):
    """Compute cycles of ``C[M,N] = A[M,K] @ B[K,N]`` on a ``rows`` x ``cols`` systolic array.

    The matrix Ball's ``timing = "systolic"``: SCALE-Sim v3's compute cycles (its total
    cycles minus its stall cycles) exactly, for dataflow ``ws``, ``os`` or ``is``.
    SCALE-Sim runs a GEMM as ``S_r`` x ``T`` operand streams onto an ``S_r`` x ``S_c``
    mapping: ``ceil(S_r/rows) * ceil(S_c/cols)`` folds, run back to back, each of
    ``fill + T`` demand lines; its total is the index of the last line (lines - 1).

    * ws (B stationary, K on rows, N on cols, M streamed):
      ``ceil(K/rows) * ceil(N/cols) * (2*rows + cols + M - 2) - 1``
    * os (C stationary, M on rows, N on cols, K streamed):
      ``ceil(M/rows) * ceil(N/cols) * (rows + cols + K - 2) - 1``
    * is (A stationary, K on rows, M on cols, N streamed):
      ``ceil(K/rows) * ceil(M/cols) * (2*rows + cols + N - 2) - 1``

    Arguments broadcast as numpy arrays; all-scalar arguments give an ``int``.
    """
    if dataflow == "ws":
        s_r, s_c, t, fill = K, N, M, 2 * rows + cols - 2
    elif dataflow == "os":
        s_r, s_c, t, fill = M, N, K, rows + cols - 2
    elif dataflow == "is":
        s_r, s_c, t, fill = K, M, N, 2 * rows + cols - 2
    else:
        raise ValueError(f"systolic dataflow must be 'ws', 'os' or 'is', got {dataflow!r}")
    folds = -(-s_r // rows) * -(-s_c // cols)
    out = folds * (fill + t) - 1
    return out if isinstance(out, np.ndarray) else int(out)


@dataclass(frozen=True)
class Lane:
    """A lane Ball: ``iter`` lines of its source bank through its arithmetic into its
    destination bank. `widths`: the instruction's element-width fields (8 or 32 each);
    `compute(ins, x)`: the result of the source's bytes `x` (uint8); `written(ins, n)`: the
    bytes it writes of `n` read."""

    widths: tuple[str, ...]
    compute: Callable
    written: Callable


def _ints(bits: int):
    return np.int8 if bits == 8 else np.int32


# The lane Balls by kind, each instruction naming its kind (`isa.Relu.ball`, ...): the machine
# runs them all through one handler (`Machine._lane`).
LANES: dict[str, Lane] = {
    "relu": Lane(("bits",), lambda ins, x: relu(x.view(_ints(ins.bits))), lambda ins, n: n),
    "fp2int": Lane(("out_bits",), lambda ins, x: fp2int(x.view(np.float32), ins.scale, ins.out_bits),
                   lambda ins, n: n // 4 * (ins.out_bits // 8)),
    "int2fp": Lane(("in_bits", "out_bits"), lambda ins, x: int2fp(x.view(_ints(ins.in_bits)), ins.scale, ins.out_bits),
                   lambda ins, n: n // (ins.in_bits // 8) * (ins.out_bits // 8)),
}
