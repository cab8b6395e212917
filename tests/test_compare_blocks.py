"""`dse.numerics.compare`'s bit comparison a block at a time (`_same_bits`) and its tile-grid
read of blocked accumulators (`_tile_grid`) give what a whole-array comparison of the
row-major copies gives: generated arrays (NaN, -0.0, strided views, longer than a block),
and a lowered, emulated graph whose one flipped bit is still found."""

from __future__ import annotations

import numpy as np
import pytest

import dse.numerics as numerics
from dse.numerics import _bits, _same_bits


def whole(got, want) -> bool:
    return bool(np.array_equal(_bits(got), _bits(want.astype(got.dtype, copy=False))))


@pytest.mark.parametrize("seed", range(12))
def test_same_bits_as_a_whole_comparison(seed, monkeypatch):
    monkeypatch.setattr(numerics, "ERR_CHUNK", 7)  # many blocks, ragged ends
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 9, int(rng.integers(1, 5))))
    dtype = [np.float32, np.int32, np.int8, np.float64][seed % 4]
    a = (rng.standard_normal(shape) * 4).astype(dtype)
    if a.dtype.kind == "f":
        a.reshape(-1)[rng.random(a.size) < 0.1] = np.nan
        a.reshape(-1)[rng.random(a.size) < 0.1] = 0.0
    big = np.zeros(tuple(d + 2 for d in shape), dtype=dtype)
    view = big[tuple(slice(1, 1 + d) for d in shape)]  # a strided view of the same values
    view[...] = a
    assert _same_bits(view, a) and whole(view, a)
    b = a.copy()
    i = int(rng.integers(0, b.size))
    flat = b.reshape(-1)
    if b.dtype.kind == "f":
        flat[i] = -0.0 if flat[i] == 0 and not np.signbit(flat[i]) else (0.0 if np.isnan(flat[i]) else np.nan)
    else:
        flat[i] = flat[i] + 1
    assert _same_bits(view, b) == whole(view, b) is False


def test_compare_finds_a_flipped_bit_in_a_blocked_accumulator():
    from dse.chips import load_chip
    from dse.frontend import run_pipeline
    from dse.lower import lower
    from dse.mapping import Candidate, Mapping
    from dse.numerics import compare
    from emulator.machine import Machine

    pipe = run_pipeline("llama_prefill", dict(seq=16, vocab=64, dim=32, layers=1, heads=2, kv_heads=1))
    graph, inputs = pipe.graph, list(pipe.inputs)
    low = lower(graph, Candidate(load_chip("goban"), Mapping(workers=4)), inputs)
    Machine(load_chip("goban"), low.program, low.image).run()
    ref = graph.trace(*inputs)
    gridded = [op for op in graph.ops
               if numerics._tile_grid(low, low.image, op.outputs[0], tuple(ref[op.outputs[0]].shape)) is not None]
    v = compare(graph, low, low.image, ref)
    assert v.integer_bit_exact and all(o.bit_exact for o in v.ops)
    # every op's verdict as the whole row-major copies give it
    assert [o.bit_exact for o in v.ops] == [whole(low.read(low.image, op.outputs[0]), ref[op.outputs[0]].numpy())
                                            for op in graph.ops]
    op = next(o for o in gridded if low.locs[o.outputs[0]].blocked.Nt > 1)  # tiles reordered in DRAM
    name = op.outputs[0]
    loc, b = low.locs[name], low.locs[name].blocked
    img = low.image.copy()
    r, c = b.M - 1, 0  # row M - 1 of column 0: in the first column tile of the last tile row
    img[loc.addr + (((b.Mt - 1) * b.Nt) * b.tm * b.tn + (r % b.tm) * b.tn + c) * 4] ^= 1
    got = low.read(img, name)
    want = ref[name].numpy()
    diff = np.argwhere(got != want)
    assert diff.tolist() == [[0] * (got.ndim - 2) + [r, c]]  # the flip landed there, and only there
    bad = compare(graph, low, img, ref)
    assert not bad.integer_bit_exact and bad.first_differing_op == op.name
    check = next(o for o in bad.ops if o.name == op.name)
    assert not check.bit_exact and check.max_abs_error == 1.0  # one flipped low bit of an int32


# blocks by hand for a [2, 3, 4, 5] array: 1 and 3 split each row of 5 (into 5, into 3 + 2); 7
# takes one row, 12 two rows of a [4, 5], 40 two [4, 5] slices of a [3, 4, 5]; 1000 the whole
@pytest.mark.parametrize("size, blocks", [(1, 120), (3, 48), (7, 24), (12, 12), (40, 4), (1000, 1)])
def test_paired_blocks_tile_the_arrays_in_order(size, blocks):
    """Every element once, in C order, in blocks of at most `size` elements, each block of `a`
    beside the same block of `b` (a strided view)."""
    from emulator.coreops import paired_blocks

    a = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    b = (-a)[:, ::-1][:, ::-1]  # the same shape, strided
    pairs = list(paired_blocks(a, b, size))
    assert np.array_equal(np.concatenate([x.reshape(-1) for x, _ in pairs]), a.reshape(-1))
    assert np.array_equal(np.concatenate([y.reshape(-1) for _, y in pairs]), b.reshape(-1))
    assert all(x.shape == y.shape and x.size <= size for x, y in pairs)
    assert len(pairs) == blocks
