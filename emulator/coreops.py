"""Core ops: work with no Ball (softmax, norms, absmax, packing, copies), run on the core.

A :class:`~emulator.isa.CoreOp` reads its ``srcs`` and writes ``dst``, each a typed view of
DRAM (:class:`~emulator.isa.DramTensor`: address, shape, dtype, optional byte strides). The
core reaches DRAM directly; it does not see the banks, so a program moves data out with
``MVOUT`` (then ``FENCE``) before a core op reads it, as the framework's toolchain does.

Time: ``ceil(elements x cycles_per_element)`` cycles on the core (``cores.op_cycles[kind]``,
else ``cores.op_cycles_per_element``), during which the core sends no instruction to the
accelerator (the accelerator keeps running what it has).

Result storing (every kind): the kind's result is broadcast to ``dst``'s shape and
converted to ``dst``'s dtype. Into an integer dtype, float values are rounded half to even
and saturated (NaN -> 0) and integer values wrap (two's complement); into fp32, values are
converted with round to nearest even. Float arithmetic is fp32 (inputs converted first).

================  ==========================================================================
kind              result
================  ==========================================================================
copy              ``src0`` (same element count as dst; reshaped in C order: packing/unpacking
                  with strided views). dtypes must match (use ``cast`` to convert)
cast              ``src0`` converted to dst's dtype by the storing rule above
fill              ``params["value"]``
add sub mul       ``src0 op src1`` (broadcast); integer operands in int64, then wrapped
max min           elementwise max / min of ``src0``, ``src1``
scale             ``src0 * params["scale"]`` in fp32
relu              ``max(src0, 0)``
exp               ``exp(src0)`` (fp32)
silu              ``x * (1 / (1 + exp(-x)))`` (fp32)
gelu_tanh         ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (fp32)
softmax           over ``params["axis"]`` (default -1): ``e = exp(x - max)``, ``e / sum(e)`` (fp32)
layernorm         over the last axis, ``eps`` (default 1e-5), biased variance; optional weight
                  ``src1`` and bias ``src2`` (fp32)
rmsnorm           ``x / sqrt(mean(x^2) + eps) * src1`` (weight optional) (fp32)
absmax            ``max(|src0|)`` over ``params["axis"]`` (default: all elements)
quant_scale       ``params.get("qmax", 127) / absmax`` over ``axis`` in fp32; absmax 0 gives 1.0
sum mean          over ``params["axis"]`` (default: all); integers summed in int64
================  ==========================================================================

:func:`register` adds a kind: ``fn(srcs: list[np.ndarray], params: dict) -> np.ndarray``.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable

import numpy as np

from .isa import DramTensor
from .program import np_dtype

CoreFn = Callable[[list, dict], Any]
_F32 = np.float32


def _f(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=_F32)


def _binary(op: Callable) -> CoreFn:
    def fn(srcs, params):
        a, b = srcs[0], srcs[1]
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            fa, fb = _f(a), _f(b)
            if fa is not a and fa.shape == np.broadcast_shapes(fa.shape, fb.shape):
                # a's fp32 copy is ours: the result goes into it (a dequantize's int32
                # accumulator is hundreds of MB; the same fp32 operation, one array fewer)
                return op(fa, fb, out=fa)
            return op(fa, fb)
        return op(a.astype(np.int64), b.astype(np.int64))
    return fn


def _axis(params):
    ax = params.get("axis")
    return tuple(ax) if isinstance(ax, list) else ax


def _copy(srcs, params):
    return srcs[0]


def _softmax(srcs, params):
    x = _f(srcs[0])
    ax = params.get("axis", -1)
    e = x - x.max(axis=ax, keepdims=True)
    np.exp(e, out=e)  # in place: one array of an attention's scores, not three
    e /= e.sum(axis=ax, keepdims=True, dtype=_F32)
    return e


def _layernorm(srcs, params):
    x = _f(srcs[0])
    eps = _F32(params.get("eps", 1e-5))
    mean = x.mean(axis=-1, keepdims=True, dtype=_F32)
    d = x - mean
    var = (d * d).mean(axis=-1, keepdims=True, dtype=_F32)
    y = d / np.sqrt(var + eps)
    if len(srcs) > 1:
        y = y * _f(srcs[1])
    if len(srcs) > 2:
        y = y + _f(srcs[2])
    return y


def _rmsnorm(srcs, params):
    x = _f(srcs[0])
    eps = _F32(params.get("eps", 1e-6))
    y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True, dtype=_F32) + eps)
    return y * _f(srcs[1]) if len(srcs) > 1 else y


def _absmax(srcs, params):
    x = srcs[0]
    a = np.abs(x.astype(np.int64)) if x.dtype.kind in "iu" else np.abs(_f(x))
    return a.max(axis=_axis(params))


def _quant_scale(srcs, params):
    m = _f(_absmax(srcs, params))
    q = _F32(params.get("qmax", 127))
    with np.errstate(divide="ignore"):
        return np.where(m == 0, _F32(1.0), q / np.where(m == 0, _F32(1.0), m)).astype(_F32)


def _sum(srcs, params):
    x = srcs[0]
    return x.sum(axis=_axis(params), dtype=np.int64 if x.dtype.kind in "iu" else _F32)


def _mean(srcs, params):
    return _f(srcs[0]).mean(axis=_axis(params), dtype=_F32)


def _gelu_tanh(srcs, params):
    x = _f(srcs[0])
    k = _F32(np.sqrt(2.0 / np.pi))
    return _F32(0.5) * x * (_F32(1.0) + np.tanh(k * (x + _F32(0.044715) * x * x * x)))


KINDS: dict[str, CoreFn] = {
    "copy": _copy,
    "cast": _copy,
    "fill": lambda srcs, params: np.asarray(params["value"]),
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "scale": lambda srcs, params: _f(srcs[0]) * _F32(params["scale"]),
    "relu": lambda srcs, params: np.maximum(srcs[0], np.zeros((), srcs[0].dtype)),
    "exp": lambda srcs, params: np.exp(_f(srcs[0])),
    "silu": lambda srcs, params: _f(srcs[0]) * (_F32(1.0) / (_F32(1.0) + np.exp(-_f(srcs[0])))),
    "gelu_tanh": _gelu_tanh,
    "softmax": _softmax,
    "layernorm": _layernorm,
    "rmsnorm": _rmsnorm,
    "absmax": _absmax,
    "quant_scale": _quant_scale,
    "sum": _sum,
    "mean": _mean,
}
# The kinds given DRAM views, not copies, of their sources (the built-in ones read their
# sources and return new arrays, or, copy and cast, the source), each with its function:
# a kind registered again without ``pure`` takes copies.
PURE: dict[str, CoreFn] = dict(KINDS)
# How many source operands each built-in kind takes (min, max).
ARITY: dict[str, tuple[int, int]] = {
    "copy": (1, 1), "cast": (1, 1), "fill": (0, 0), "add": (2, 2), "sub": (2, 2), "mul": (2, 2),
    "max": (2, 2), "min": (2, 2), "scale": (1, 1), "relu": (1, 1), "exp": (1, 1), "silu": (1, 1),
    "gelu_tanh": (1, 1), "softmax": (1, 1), "layernorm": (1, 3), "rmsnorm": (1, 2), "absmax": (1, 1),
    "quant_scale": (1, 1), "sum": (1, 1), "mean": (1, 1),
}


def register(kind: str, fn: CoreFn, arity: tuple[int, int] = (0, 64), pure: bool = False) -> None:
    """Add (or replace) a core-op kind. ``pure=True``: `fn` never writes into its sources (it
    may return one, or a view of one), so it is given the DRAM views themselves, not copies."""
    KINDS[kind] = fn
    ARITY[kind] = arity
    if pure:
        PURE[kind] = fn
    else:
        PURE.pop(kind, None)


def dram_extent(t: DramTensor) -> tuple[int, int]:
    """The bytes [lo, hi) of DRAM a tensor's view (`dram_view`) spans: for the static walks
    over a program's accesses (`emulator.prefault`, `dse.numerics.boundary`)."""
    size = np_dtype(t.dtype).itemsize
    if any(n == 0 for n in t.shape):
        return t.addr, t.addr
    if t.strides is None:
        return t.addr, t.addr + size * int(np.prod(t.shape, dtype=np.int64))
    return t.addr, t.addr + size + sum((n - 1) * s for n, s in zip(t.shape, t.strides))


def dram_view(img: np.ndarray, t: DramTensor) -> np.ndarray:
    """A writable numpy view of DRAM; raises ValueError when it leaves the image."""
    dt = np_dtype(t.dtype)
    shape = t.shape
    strides = t.strides
    if strides is None:
        strides, acc = [], dt.itemsize
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        strides = tuple(reversed(strides))
    if any(s < 0 for s in strides):
        raise ValueError(f"negative strides {strides}")
    if any(n == 0 for n in shape):
        extent = 0
    else:
        extent = dt.itemsize + sum((n - 1) * s for n, s in zip(shape, strides))
    if t.addr < 0 or t.addr + extent > img.size:
        raise ValueError(f"DRAM bytes [{t.addr}, {t.addr + extent}) are outside the {img.size}-byte image")
    return np.ndarray(shape, dtype=dt, buffer=img, offset=t.addr, strides=strides)


# Elements a float -> integer store converts at a time: its temporary stays in the cache.
STORE_CHUNK = 1 << 16

# The built-in kinds whose result's element i is an exactly rounded function of the sources'
# elements i alone, each with its function: `execute` runs them a block of STORE_CHUNK
# elements at a time, each block's result stored before the next is computed. The same
# bits as the whole array at once, without its temporaries: a Llama layer's dequantize
# (int32 x fp32 -> fp32) and requantize (fp32 -> int8) are millions of elements, and their
# whole-array copies were fresh pages (the kernel zeroing them) and twice the memory
# traffic. A kind registered again is not among them.
BLOCKWISE: dict[str, CoreFn] = {k: KINDS[k] for k in ("add", "sub", "mul", "max", "min", "scale", "relu")}


# Arrays of at least this many elements are worked block by block on two threads (`_shared`):
# a Llama layer's dequantize and requantize are tens of millions. Each block is computed and
# stored as on one thread (the blocks are disjoint, each wholly one thread's): the same bits.
SHARED_ELEMENTS = 1 << 22


def _shared(blocks: list, work: Callable) -> None:
    """work(block) for every block, by this thread and one helper taking blocks from a shared
    counter (numpy lets the GIL go while it computes). If the helper has not started by the
    time this thread has taken the last block (a busy machine: no core for it), this thread
    waits for nothing; an error on either thread stops the other's taking and is raised here."""
    if len(blocks) < 2:
        for b in blocks:
            work(b)
        return
    counter, n = itertools.count(), len(blocks)  # next() on a count is atomic under the GIL
    lock, done = threading.Lock(), threading.Event()
    state = {"started": False, "cancelled": False, "error": None}

    def take():
        while not state["error"] and not state["cancelled"]:
            i = next(counter)
            if i >= n:
                return
            work(blocks[i])

    def helper():
        with lock:
            if state["cancelled"]:
                return
            state["started"] = True
        try:
            take()
        except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread
            state["error"] = exc
        finally:
            done.set()

    threading.Thread(target=helper, name="dse-coreop", daemon=True).start()
    try:
        take()
    except BaseException:
        state["cancelled"] = True
        with lock:
            started = state["started"]
        if started:
            done.wait()
        raise
    with lock:
        if not state["started"]:
            state["cancelled"] = True
            return
    done.wait()
    if state["error"] is not None:
        raise state["error"]


def _each(blocks, work: Callable, elements: int) -> None:
    """work(block) for every block: on two threads (`_shared`) for an array of `elements` at
    least `SHARED_ELEMENTS`, else in order on this one."""
    if elements >= SHARED_ELEMENTS:
        _shared(list(blocks), work)
    else:
        for block in blocks:
            work(block)


def _blocks(arrays: list, size: int):
    """Tuples of sub-blocks of arrays of one shape (`paired_blocks`'s split, any number)."""
    a = arrays[0]
    if a.size <= size or a.ndim == 0:
        yield arrays
        return
    per = a.size // a.shape[0]
    if per <= size:
        step = size // per
        for i in range(0, a.shape[0], step):
            yield [x[i:i + step] for x in arrays]
    else:
        for i in range(a.shape[0]):
            yield from _blocks([x[i] for x in arrays], size)


def _same_elements(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether a's element i is b's element i, byte for byte (one array read and written in place)."""
    return (a.shape == b.shape and a.strides == b.strides and a.itemsize == b.itemsize
            and a.__array_interface__["data"][0] == b.__array_interface__["data"][0])


def _blockwise(fn: CoreFn, views: list, out: np.ndarray, params) -> bool:
    """Run an elementwise kind block by block into `out`; False (nothing done) where the
    sources do not have out's shape once broadcast, or one overlaps out other than element
    for element (a block would then read what an earlier one wrote)."""
    try:
        if np.broadcast_shapes(*(v.shape for v in views)) != out.shape:
            return False
    except ValueError:
        return False
    if any(np.may_share_memory(v, out) and not _same_elements(v, out) for v in views):
        return False
    srcs = [v if v.shape == out.shape else np.broadcast_to(v, out.shape) for v in views]
    params = dict(params)
    _each(_blocks([out] + srcs, STORE_CHUNK), lambda block: store(block[0], fn(block[1:], params)), out.size)
    return True


def paired_blocks(a: np.ndarray, b: np.ndarray, size: int):
    """Pairs of sub-blocks of two arrays of one shape along their leading axes, each of at
    most `size` elements (or one row of the last axis). A block takes as many whole slices
    of the leading axis as fit: a real layer's [8, 8192, 2048] scores are 2,048 blocks of
    32 rows, not 65,536 of one (the per-block overhead was seconds)."""
    if a.size <= size or a.ndim == 0:
        yield a, b
        return
    per = a.size // a.shape[0]  # elements of one slice along the leading axis
    if per <= size:
        step = size // per
        for i in range(0, a.shape[0], step):
            yield a[i:i + step], b[i:i + step]
    else:
        for x, y in zip(a, b):
            yield from paired_blocks(x, y, size)


def _round_store(dst: np.ndarray, v: np.ndarray, work, lo: int, hi: int) -> None:
    t = v.astype(work)  # the one temporary: rounded, saturated and NaN -> 0 in place
    np.rint(t, out=t)
    np.clip(t, lo, hi, out=t)
    t[np.isnan(t)] = 0.0
    np.copyto(dst, np.broadcast_to(t, dst.shape), casting="unsafe")


def store(dst: np.ndarray, value) -> None:
    """Store `value` into `dst` by the rule in the module docstring."""
    v = np.asarray(value)
    if dst.dtype.kind in "iu" and v.dtype.kind == "f":
        info = np.iinfo(dst.dtype)
        # Rounded in float64; an fp32 value into at most 16 bits in fp32, the same integers:
        # rint of an fp32 is an fp32, and fp32 holds both bounds and every integer between.
        work = _F32 if v.dtype == _F32 and dst.dtype.itemsize <= 2 else np.float64
        if v.shape == dst.shape and not np.may_share_memory(dst, v):  # (a block must not see a written one)
            _each(paired_blocks(dst, v, STORE_CHUNK), lambda pair: _round_store(pair[0], pair[1], work, info.min,
                                                                                  info.max), dst.size)
        else:
            _round_store(dst, v, work, info.min, info.max)
        return
    # Straight into dst, no temporaries: an integer to a narrower integer keeps its low bits
    # (two's complement wrap, as through int64), a float to fp32 rounds to nearest even.
    np.copyto(dst, np.broadcast_to(v, dst.shape), casting="unsafe")


def execute(img: np.ndarray, kind: str, dst: DramTensor | None, srcs, params) -> None:
    """Run one core op on the DRAM image (ValueError/KeyError on bad operands)."""
    fn = KINDS[kind]
    lo, hi = ARITY.get(kind, (0, 64))
    if not lo <= len(srcs) <= hi:
        raise ValueError(f"core op {kind} takes {lo}..{hi} sources, got {len(srcs)}")
    views = [dram_view(img, s) for s in srcs]
    if kind == "copy":
        if dst is None or views[0].size != dst.size:
            raise ValueError(f"copy needs a destination of {views[0].size} elements")
        if np_dtype(dst.dtype) != views[0].dtype:
            raise ValueError(f"copy keeps the dtype ({views[0].dtype} -> {dst.dtype}); use cast")
        out = dram_view(img, dst)
        out[...] = views[0].reshape(out.shape)  # numpy copies through a temporary where they overlap
        return
    if dst is not None and BLOCKWISE.get(kind) is fn:
        out = dram_view(img, dst)
        if _blockwise(fn, views, out, params):
            return
    # A pure kind's result may be (a view of) a source: `store` copies through numpy's
    # overlap check where it overlaps the destination.
    result = fn(views if PURE.get(kind) is fn else [v.copy() for v in views], dict(params))
    if dst is None:
        return
    out = dram_view(img, dst)
    if kind == "cast" and views[0].size == out.size:
        result = np.asarray(result).reshape(out.shape)
    store(out, result)
