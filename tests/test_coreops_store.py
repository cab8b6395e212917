"""`emulator.coreops.store` a block at a time (fp32 rounding into 8 and 16 bits) and
`execute` handing built-in kinds the DRAM views themselves: the bits of the one-temporary
float64 store and of copied sources, on generated values (halves, NaN, inf, out of range,
broadcasts, strided and overlapping views)."""

from __future__ import annotations

import numpy as np
import pytest

import emulator.coreops as co
from emulator.isa import DramTensor


def float64_store(dst: np.ndarray, value) -> None:
    """The store before: one float64 temporary for the whole value."""
    v = np.asarray(value)
    if dst.dtype.kind in "iu" and v.dtype.kind == "f":
        info = np.iinfo(dst.dtype)
        v = v.astype(np.float64)
        np.rint(v, out=v)
        np.clip(v, info.min, info.max, out=v)
        v[np.isnan(v)] = 0.0
    np.copyto(dst, np.broadcast_to(v, dst.shape), casting="unsafe")


def values(rng, shape, dtype):
    v = rng.standard_normal(shape) * rng.choice([1.0, 100.0, 1e5, 1e10])
    flat = v.reshape(-1)
    pick = rng.random(flat.size)
    flat[pick < 0.1] = np.round(flat[pick < 0.1]) + 0.5  # ties: to even
    flat[(pick >= 0.1) & (pick < 0.13)] = np.nan
    flat[(pick >= 0.13) & (pick < 0.15)] = np.inf
    flat[(pick >= 0.15) & (pick < 0.17)] = -np.inf
    flat[(pick >= 0.17) & (pick < 0.2)] = rng.choice([127.5, -128.5, 32767.5, -32768.5, 2.0 ** 31, -2.0 ** 31 - 1])
    return v.astype(dtype)


@pytest.mark.parametrize("two", [False, True])  # blocks on two threads (`co._shared`) from any size
@pytest.mark.parametrize("seed", range(24))
def test_store_gives_the_float64_stores_bits(seed, two, monkeypatch):
    monkeypatch.setattr(co, "STORE_CHUNK", [5, 64, 1 << 16][seed % 3])
    if two:
        monkeypatch.setattr(co, "SHARED_ELEMENTS", 0)
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 12, int(rng.integers(1, 4))))
    src = values(rng, shape, [np.float32, np.float64][seed % 2])
    dtype = ["int8", "uint8", "int16", "int32"][(seed // 2) % 4]
    for value in (src, src[..., :1], src.reshape(-1)[0]):  # same shape, broadcast along a row, a scalar
        a = np.zeros(tuple(d + 1 for d in shape), dtype=dtype)
        b = a.copy()
        sl = tuple(slice(1, None) for _ in shape)  # a strided destination
        co.store(a[sl], value)
        float64_store(b[sl], value)
        assert np.array_equal(a, b), (dtype, value)


@pytest.mark.parametrize("kind, params, srcs, dtype", [
    ("cast", {}, ["float32"], "int8"),
    ("cast", {}, ["int32"], "int8"),
    ("copy", {}, ["int32"], "int32"),
    ("scale", {"scale": 0.37}, ["int32"], "int8"),
    ("mul", {}, ["float32", "float32"], "int8"),
    ("add", {}, ["int32", "int32"], "int32"),
    ("relu", {}, ["int8"], "int8"),
    ("softmax", {}, ["float32"], "float32"),
    ("rmsnorm", {}, ["float32", "float32"], "float32"),
])
@pytest.mark.parametrize("shift", [0, 64, 4096])  # dst on its source, overlapping it, apart
@pytest.mark.parametrize("two", [False, True])  # 31 blocks of 100 elements on two threads
def test_builtin_kinds_on_dram_views_match_copies(kind, params, srcs, dtype, shift, two, monkeypatch):
    if two:
        monkeypatch.setattr(co, "SHARED_ELEMENTS", 0)
        monkeypatch.setattr(co, "STORE_CHUNK", 100)
    rng = np.random.default_rng(len(kind) + shift)
    shape = (64, 48)
    img = np.zeros(1 << 16, dtype=np.uint8)
    tensors = []
    addr = 0
    for i, d in enumerate(srcs):
        t = DramTensor(addr, shape, d)
        view = co.dram_view(img, t)
        view[...] = (rng.standard_normal(shape) * 60).astype(d) if d.startswith("f") else \
            rng.integers(-100, 100, shape).astype(d)
        tensors.append(t)
        addr += 16384
    dst = DramTensor(shift, shape, dtype)
    want = img.copy()
    # the old execute: sources copied before the kind runs
    out = co.dram_view(want, dst)
    result = co.KINDS[kind]([co.dram_view(want, t).copy() for t in tensors], dict(params))
    if kind == "copy":
        out[...] = co.dram_view(want, tensors[0]).copy()
    else:
        float64_store(out, np.asarray(result).reshape(out.shape) if kind == "cast" else result)
    co.execute(img, kind, dst, tensors, params)
    assert np.array_equal(img, want)


def test_a_registered_kind_gets_copies(monkeypatch):
    seen = []

    def scribble(srcs, params):  # writes into what it is given
        seen.append(srcs[0])
        srcs[0][...] = 7
        return srcs[0] + 1

    monkeypatch.setitem(co.KINDS, "scribble", scribble)
    monkeypatch.setitem(co.ARITY, "scribble", (1, 1))
    monkeypatch.setitem(co.KINDS, "relu", scribble)  # a built-in kind replaced: copies too
    for kind in ("scribble", "relu"):
        img = np.arange(256, dtype=np.uint8) % 100
        co.execute(img, kind, DramTensor(128, (64,), "int8"), [DramTensor(0, (64,), "int8")], {})
        assert np.array_equal(img[:64], np.arange(64))  # the source is untouched
        assert (img[128:192] == 8).all()


def test_a_pure_registered_kind_reads_the_image_itself(monkeypatch):
    seen = []

    def negate(srcs, params):
        seen.append(srcs[0])
        return -srcs[0]

    img = (np.arange(256) % 100).astype(np.uint8)
    monkeypatch.setitem(co.KINDS, "negate", negate)
    monkeypatch.setitem(co.ARITY, "negate", (1, 1))
    monkeypatch.setitem(co.PURE, "negate", negate)
    co.execute(img, "negate", DramTensor(64, (64,), "int8"), [DramTensor(0, (64,), "int8")], {})
    assert np.shares_memory(seen[0], img)
    assert np.array_equal(img[64:128].view(np.int8), -np.arange(64, dtype=np.int8))
    co.register("negate", negate, (1, 1))  # registered again, not pure: copies
    co.execute(img, "negate", DramTensor(128, (64,), "int8"), [DramTensor(0, (64,), "int8")], {})
    assert not np.shares_memory(seen[1], img) and "negate" not in co.PURE


@pytest.mark.parametrize("kind, op", [("mul", np.multiply), ("add", np.add), ("sub", np.subtract),
                                      ("max", np.maximum), ("min", np.minimum)])
@pytest.mark.parametrize("shapes", [((6, 8), (6, 8)), ((6, 8), (1, 8)), ((1, 8), (6, 8))])
def test_float_binary_kinds_written_into_their_own_copy_keep_the_bits(kind, op, shapes):
    """An int32 operand made fp32 takes the result in place (where the result has its shape):
    the bits of the operation on fresh arrays, broadcasts either way, the sources untouched."""
    rng = np.random.default_rng(len(kind))
    a = rng.integers(-2**31, 2**31 - 1, shapes[0]).astype(np.int32)
    b = (rng.standard_normal(shapes[1]) * 1e-3).astype(np.float32)
    a0, b0 = a.copy(), b.copy()
    got = co.KINDS[kind]([a, b], {})
    want = op(a.astype(np.float32), b)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(a, a0) and np.array_equal(b, b0)


def test_softmax_in_place_keeps_the_bits():
    x = (np.random.default_rng(3).standard_normal((5, 7, 33)) * 20).astype(np.float32)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    want = e / e.sum(axis=-1, keepdims=True, dtype=np.float32)
    got = co.KINDS["softmax"]([x], {})
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def _strided(img, addr, shape, dtype, perm):
    """A DramTensor over `shape` whose axes are laid out in the order `perm` (a tile-order view)."""
    item = np.dtype(dtype).itemsize
    strides, acc = [0] * len(shape), item
    for ax in reversed(perm):
        strides[ax] = acc
        acc *= shape[ax]
    return DramTensor(addr, shape, {"float32": "fp32"}.get(dtype, dtype), tuple(strides))


@pytest.mark.parametrize("kind, params, srcs, dtype", [
    ("mul", {}, ["int32", "float32"], "float32"),  # a dequantize
    ("scale", {"scale": 40.2}, ["float32"], "int8"),  # a requantize
    ("add", {}, ["float32", "float32"], "int16"),
    ("sub", {}, ["int32", "int8"], "int32"),
    ("max", {}, ["float32", "int32"], "float32"),
    ("min", {}, ["int8", "int8"], "int8"),
    ("relu", {}, ["int32"], "int8"),
])
@pytest.mark.parametrize("layout", ["plain", "tiles", "broadcast", "in place", "overlapping"])
def test_elementwise_kinds_block_by_block_give_the_whole_arrays_bits(kind, params, srcs, dtype, layout,
                                                                      monkeypatch):
    """`execute` runs the elementwise kinds a block at a time (blocks of 100 elements here,
    so that a [3, 2, 5, 8, 6] operand is many): the whole-array result's bits, with sources in
    tile order, broadcast, the destination on its first source element for element (an
    in-place dequantize) and overlapping it otherwise, or a source smaller than the destination
    (these two the whole array at once)."""
    monkeypatch.setattr(co, "STORE_CHUNK", 100)
    rng = np.random.default_rng(len(kind) * 7 + len(layout))
    shape = (3, 2, 5, 8, 6)
    img = np.zeros(1 << 16, dtype=np.uint8)
    tensors = []
    for i, d in enumerate(srcs):
        sh = (1, 2, 1, 8, 6) if layout == "broadcast" and i == len(srcs) - 1 else shape
        perm = (0, 1, 3, 2, 4) if layout == "tiles" and i == 0 else tuple(range(5))
        t = _strided(img, 8192 * (i + 1), sh, d, perm)
        view = co.dram_view(img, t)
        view[...] = (values(rng, sh, np.float64) if d.startswith("f") else
                     rng.integers(-2**31 if d == "int32" else -128, 2**31 - 1 if d == "int32" else 127, sh)).astype(d)
        if d.startswith("f"):
            view[~np.isfinite(view)] = 1.5
        tensors.append(t)
    item0 = np.dtype(srcs[0]).itemsize
    if layout == "in place" and np.dtype(dtype).itemsize == item0:
        dst = DramTensor(tensors[0].addr, shape, {"float32": "fp32"}.get(dtype, dtype), tensors[0].strides)
    elif layout == "overlapping":
        dst = DramTensor(tensors[0].addr + 40, shape, {"float32": "fp32"}.get(dtype, dtype))
    else:
        dst = DramTensor(40000, shape, {"float32": "fp32"}.get(dtype, dtype))
    want = img.copy()
    result = co.KINDS[kind]([co.dram_view(want, t).copy() for t in tensors], dict(params))
    float64_store(co.dram_view(want, dst), result)
    co.execute(img, kind, dst, tensors, params)
    assert np.array_equal(img, want)


def test_shared_blocks_are_each_worked_once_and_an_error_is_raised_here():
    """`_shared`: every block exactly once, between the two threads; an error on a block
    (whichever thread took it) raised on the caller's, the other thread's taking stopped."""
    seen = []
    co._shared(list(range(500)), lambda i: seen.append(i))
    assert sorted(seen) == list(range(500))

    def work(i):
        if i == 37:
            raise ValueError("block 37")
    with pytest.raises(ValueError, match="block 37"):
        co._shared(list(range(500)), work)
