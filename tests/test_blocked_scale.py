"""A blocked accumulator's scale in DRAM: only along the axes it varies over or that have
padding, read by the core op with stride 0 along the others; each product meets the very
element the whole padded tensor (the lowering's layout before) held."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dse.plan.memory import Blocked, Dram, Loc
from dse.plan.streams import blocked_scale, blocked_scale_extent, scale_core_op
from emulator.coreops import dram_view


def whole_padded(scale, shape, acc: Blocked) -> np.ndarray:
    """The scale as the lowering laid it out before: every element of the padded grid,
    zero over the padding."""
    full = np.zeros((acc.batch, acc.Mt * acc.tm, acc.Nt * acc.tn), dtype=np.float32)
    full[:, :acc.M, :acc.N] = np.broadcast_to(np.asarray(scale, dtype=np.float32), shape).reshape(
        acc.batch, acc.M, acc.N)
    return full.reshape(acc.batch, acc.Mt, acc.tm, acc.Nt, acc.tn)


def blocked(logical, tm, tn) -> Blocked:
    batch, M, N = logical
    return Blocked(batch, -(-M // tm), -(-N // tn), tm, tn, M, N)


def read_scale(scale, shape, acc: Blocked) -> tuple[np.ndarray, int]:
    """The scale operand of the core op the lowering emits, as the emulator reads it, and
    the DRAM the lowering placed for it."""
    dram = Dram()
    src = Loc(0, tuple(shape), "int32", (acc.batch, acc.Mt * acc.tm, acc.Nt * acc.tn), acc)
    out = Loc(0, tuple(shape), "float32", (acc.batch, acc.Mt * acc.tm, acc.Nt * acc.tn))
    op = scale_core_op(dram, src, out, np.asarray(scale, dtype=np.float32), tuple(shape))
    img = dram.image()
    return dram_view(img, op.srcs[1]), dram.top


def test_a_per_tensor_scale_over_the_scores_is_one_word_not_the_tensor():
    # 8 heads of [64, 32] scores, tiles dividing them: no padding
    shape, acc = (1, 8, 64, 32), blocked((8, 64, 32), 16, 16)
    got, placed = read_scale(0.125, shape, acc)
    assert placed == 64  # one fp32, 64-byte aligned (was 8 x 64 x 32 x 4 = 65,536 B)
    assert got.strides == (0, 0, 0, 0, 0)
    np.testing.assert_array_equal(got, whole_padded(0.125, shape, acc))


def test_a_per_column_scale_keeps_the_rows_where_they_are_padded():
    # 20 rows in tiles of 16: rows 20..31 are padding, multiplied by a zero scale
    scale = np.arange(1, 33, dtype=np.float32).reshape(1, 1, 32)
    acc = blocked((1, 20, 32), 16, 16)
    assert blocked_scale_extent(scale, (1, 20, 32), (1, 20, 32), (1, 32, 32)) == (1, 32, 32)
    got, _ = read_scale(scale, (1, 20, 32), acc)
    np.testing.assert_array_equal(got, whole_padded(scale, (1, 20, 32), acc))
    # no row padding: the 32 columns alone
    assert blocked_scale_extent(scale, (1, 32, 32), (1, 32, 32), (1, 32, 32)) == (1, 1, 32)


def test_a_conv_output_splits_its_rows_over_the_spatial_axes():
    # NHWC [1, 14, 14, 64]: the accumulator's rows are the 196 positions, a per-channel scale
    scale = np.linspace(0.5, 2.0, 64, dtype=np.float32)
    kept = blocked_scale(scale, (1, 14, 14, 64), (1, 196, 64), (1, 208, 64))
    assert kept.shape == (1, 208, 64)  # rows padded 196 -> 208: kept whole, zero past row 196
    np.testing.assert_array_equal(kept[0, 195], scale)
    assert not kept[0, 196:].any()
    assert blocked_scale(scale, (1, 16, 16, 64), (1, 256, 64), (1, 256, 64)).shape == (1, 1, 64)


@pytest.mark.parametrize("seed", range(40))
def test_generated_scales_read_as_the_whole_padded_tensor(seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(2, 5))
    shape = [int(n) for n in rng.integers(1, 6, size=rank)]
    shape[-1] = int(rng.integers(1, 40))
    shape[-2] = int(rng.integers(1, 40))
    tm, tn = (int(x) for x in rng.choice([1, 2, 4, 8, 16], size=2))
    # a scale broadcast along a random subset of the axes (kept at 1 there), or a scalar
    sshape = tuple(n if rng.random() < 0.5 else 1 for n in shape)[int(rng.integers(0, rank + 1)):]
    scale = rng.uniform(0.1, 2.0, size=sshape).astype(np.float32)
    logical = (math.prod(shape[:-2]), shape[-2], shape[-1])
    acc = blocked(logical, tm, tn)
    got, placed = read_scale(scale, shape, acc)
    want = whole_padded(scale, shape, acc)
    np.testing.assert_array_equal(got, want)
    assert placed <= -(-want.nbytes // 64) * 64
