"""The reference interpreter of a Graph: one torch function per op kind, reading only the
op's kind and attrs (`Graph.trace` and `Graph.run` call it). Kept apart from the graph's
data (`dse.workload.graph`) so that reading a graph needs no torch."""

from __future__ import annotations

import operator
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from dse.workload.scan import run_rnn_cell, run_scan
from dse.workload.vocabulary import (ATEN_CALLS, ATEN_ELEMENTWISE, AtenCall, CHANNELS_FIRST_WEIGHTS, CHANNELS_LAST_WEIGHTS, ARG_KINDS, BINARY_KINDS, CHANNELS_LAST, CONV_KINDS, INT8_MAX, INT8_MIN, KINDS,
                                POOL_KINDS, REDUCE_KINDS, Op, scale_array)




def torch_dtype(dtype: str) -> torch.dtype:
    return getattr(torch, dtype)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def weight_array(tensor: torch.Tensor, copy: bool = True) -> np.ndarray:
    """numpy has no bfloat16: keep its bits as uint16 (the TensorSpec keeps the dtype).
    ``copy=False``: a contiguous CPU tensor's own memory (the caller guarantees nobody
    writes it: a captured module's parameters, which the graph only reads)."""
    tensor = tensor.detach().cpu().contiguous()
    if copy:
        tensor = tensor.clone()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


def weight_tensor(array: np.ndarray, dtype: str) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    if dtype == "bfloat16":
        return tensor.view(torch.bfloat16)
    return tensor


def scale_tensor(attrs: dict[str, Any], shape: tuple[int, ...]) -> torch.Tensor:
    """`dse.workload.vocabulary.scale_array` as a torch tensor."""
    return torch.from_numpy(scale_array(attrs, shape))


def is_integer(tensor: torch.Tensor) -> bool:
    return not tensor.dtype.is_floating_point and tensor.dtype != torch.bool


def wrap_int32(values: torch.Tensor) -> torch.Tensor:
    """int64 -> int32 with two's-complement wraparound (what a 32-bit accumulator keeps)."""
    return (((values.to(torch.int64) + 2**31) % 2**32) - 2**31).to(torch.int32)


INT32_MAX = 2**31 - 1
FLOAT32_EXACT = 2**24  # every integer of magnitude up to this is a float32


def _magnitude_bound(t: torch.Tensor) -> int | None:
    """An upper bound of |t| known from its dtype (int8), or None."""
    return 128 if t.dtype == torch.int8 else None


def _product_bound(a: torch.Tensor, b: torch.Tensor, k: int) -> int | None:
    """An upper bound of every partial sum of a product reducing `k` terms of a x b (None: unknown)."""
    ma, mb = _magnitude_bound(a), _magnitude_bound(b)
    return None if ma is None or mb is None else k * ma * mb


def _exact_dtype(bound: int | None) -> torch.dtype:
    # A float sum of integers is exact in any order while every partial sum is one the float
    # type holds: float32 (BLAS at half the memory of float64) below 2**24, else float64
    # (int8 x int8 sums stay far below 2**53).
    return torch.float32 if bound is not None and bound < FLOAT32_EXACT else torch.float64


def _int8_gemm_exact() -> bool:
    """Whether torch's int8 GEMM (`torch._int_mm`: int8 x int8 summed in int32) gives the exact
    products on this machine, tried once on the values that would break a kernel that sums
    pairs of products in int16 (AVX2's vpmaddubsw saturates -128 x -128 + -128 x -128), and on
    mixed signs, strides and odd sizes."""
    global _INT8_EXACT
    if _INT8_EXACT is None:
        try:
            g = torch.Generator().manual_seed(0)
            cases = [(torch.full((17, 64), -128, dtype=torch.int8), torch.full((64, 9), -128, dtype=torch.int8)),
                     (torch.full((3, 40), 127, dtype=torch.int8), torch.full((9, 40), -128, dtype=torch.int8).t()),
                     (torch.randint(-128, 128, (33, 1030), generator=g, dtype=torch.int8),
                      torch.randint(-128, 128, (1030, 24), generator=g, dtype=torch.int8))]
            _INT8_EXACT = all(torch.equal(torch._int_mm(x, y), (x.to(torch.int64) @ y.to(torch.int64)).to(torch.int32))
                              for x, y in cases)
        except (RuntimeError, AttributeError, NotImplementedError):
            _INT8_EXACT = False
    return _INT8_EXACT


def _int8_gemm_fast() -> bool:
    """Whether torch's int8 GEMM has a fast kernel here: oneDNN's int8 matmul needs AVX-512 (torch's
    CPU capability "AVX512"). With AVX2 alone it is a reference loop, about 0.5 GMAC/s: 130x
    slower than the float32 slices below on an AMD EPYC (an 8B-shaped layer's integer check
    139 s instead of 5), where with AVX-512 it is about 5x faster than them."""
    return torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def _int8_gemm_used() -> bool:
    """Whether int8 x int8 products go to torch's int8 GEMM: exact and fast here (else the
    float path, the same bits)."""
    global _INT8_GEMM
    if _INT8_GEMM is None:
        _INT8_GEMM = _int8_gemm_fast() and _int8_gemm_exact()
    return _INT8_GEMM


_INT8_EXACT: bool | None = None
_INT8_GEMM: bool | None = None


def _int8_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b of int8 tensors (broadcast over leading dims) as int32, by torch's int8 GEMM, one
    2-D product per matrix of the batch: with AVX-512, 5x the float32 slices on a real layer's
    products, with no float copies of the operands."""
    *batch_a, m, k = a.shape
    *batch_b, _, n = b.shape
    # oneDNN takes a matrix with unit stride along one of its axes (a weight's transpose
    # included); any other view is copied rather than left to a slow fallback
    a, b = (t if t.stride(-1) == 1 or t.stride(-2) == 1 else t.contiguous() for t in (a, b))
    batch = torch.broadcast_shapes(tuple(batch_a), tuple(batch_b))
    if not batch_b or all(d == 1 for d in batch_b):  # one B for every row of A: one product
        out = torch._int_mm(a.reshape(-1, k), b.reshape(k, n))
        return out.reshape(*batch, m, n)
    a = a.expand(*batch, m, k).reshape(-1, m, k)
    b = b.expand(*batch, k, n).reshape(-1, k, n)
    out = torch.empty((a.shape[0], m, n), dtype=torch.int32)
    for i in range(a.shape[0]):
        torch._int_mm(a[i], b[i], out=out[i])
    return out.reshape(*batch, m, n)


def _int_matmul(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, int | None]:
    """a @ b of integer tensors, exact, and its bound. int8 x int8 whose sums fit int32: torch's
    int8 GEMM where it is exact and fast here (`_int8_gemm_used`). Otherwise in float: a reduction
    too long for float32 whose sums fit int32 (int8 x int8 over 1,024 terms or more) goes in
    slices of K that float32 holds, summed in int32: half the memory and twice the speed of
    float64."""
    k = a.shape[-1]
    bound = _product_bound(a, b, k)
    if (bound is not None and bound <= INT32_MAX and b.dim() >= 2 and a.dim() >= 2 and a.dtype == torch.int8
            and b.dtype == torch.int8 and min(a.shape[-2], k, b.shape[-1]) > 0 and _int8_gemm_used()):
        return _int8_matmul(a, b), bound
    step = (FLOAT32_EXACT - 1) // (bound // k) if bound else k
    if bound is None or b.dim() < 2 or not 0 < step < k or bound > INT32_MAX:
        exact = _exact_dtype(bound)
        return torch.matmul(a.to(exact), b.to(exact)), bound
    acc = None
    for start in range(0, k, step):
        part = torch.matmul(a[..., start:start + step].to(torch.float32),
                            b[..., start:start + step, :].to(torch.float32)).to(torch.int32)
        acc = part if acc is None else acc.add_(part)
    return acc, bound


def _exact(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float64)  # every int8 / int32 value is a float64


def _int_result(acc: torch.Tensor, bound: int | None, bias: torch.Tensor | None,
                bias_shape: list[int] | None) -> torch.Tensor:
    """The int32 accumulator of an exact float product (+ the int32 bias), wrapped mod 2**32.
    With a known bound that no sum can exceed, int32 holds every value: no int64 copies."""
    bias = None if bias is None else (bias.reshape(bias_shape) if bias_shape else bias)
    bias_bound = int(bias.to(torch.int64).abs().max()) if bias is not None and bias.numel() else 0
    if bound is not None and bound + bias_bound <= INT32_MAX:
        total = acc.to(torch.int32)
        return total if bias is None else total.add_(bias.to(torch.int32))
    total = (acc.round() if acc.is_floating_point() else acc).to(torch.int64)
    if bias is not None:
        total = total + bias.to(torch.int64)
    return wrap_int32(total)


# --- reference interpreter: one function per kind, reading only kind + attrs ---

def _run_linear(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    if is_integer(args[0]):
        x, w, *bias = args
        return _int_result(*_int_matmul(x, w.T), bias[0] if bias else None, None)
    return F.linear(*args)


def _run_matmul(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    if is_integer(args[0]):
        a, b, *bias = args
        return _int_result(*_int_matmul(a, b), bias[0] if bias else None, None)
    if op.attrs.get("has_bias"):
        a, b, bias = args
        beta, alpha = op.attrs.get("beta", 1), op.attrs.get("alpha", 1)
        if a.dim() == 2 and b.dim() == 2:
            return torch.addmm(bias, a, b, beta=beta, alpha=alpha)
        product = torch.matmul(a, b)
        return (product if alpha == 1 else product * alpha) + (bias if beta == 1 else bias * beta)
    return torch.matmul(*args)


def _to_channels_first(x: torch.Tensor, layout: str) -> torch.Tensor:
    return x.movedim(-1, 1) if layout in CHANNELS_LAST else x


def _from_channels_first(x: torch.Tensor, layout: str) -> torch.Tensor:
    return x.movedim(1, -1) if layout in CHANNELS_LAST else x


def conv_weight_oi(w: torch.Tensor, weight_layout: str) -> torch.Tensor:
    """A conv weight in any supported layout as [out, in, *kernel] (OIW / OIHW)."""
    if weight_layout in CHANNELS_FIRST_WEIGHTS.values():
        return w
    if weight_layout in CHANNELS_LAST_WEIGHTS:  # [*kernel, in, out]
        k = w.dim() - 2
        return w.permute(k + 1, k, *range(k))
    raise ValueError(f"weight layout {weight_layout!r}")


def _run_conv(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    a = op.attrs
    x, w, *bias = args
    layout = a.get("layout", "NCHW")
    x = _to_channels_first(x, layout)
    nd = CONV_KINDS.index(op.kind) + 1
    w = conv_weight_oi(w, a.get("weight_layout", CHANNELS_FIRST_WEIGHTS[nd]))
    conv = (F.conv1d, F.conv2d, F.conv3d)[nd - 1]
    kw = dict(stride=a["stride"], padding=a["padding"], dilation=a["dilation"], groups=a.get("groups", 1))
    if is_integer(x):
        bound = _product_bound(x, w, w[0].numel())  # K: in channels of a group x kernel taps
        exact = _exact_dtype(bound)
        y = conv(x.to(exact), w.to(exact), None, **kw)
        y = _int_result(y, bound, bias[0] if bias else None, [1, -1] + [1] * (y.dim() - 2))
    else:
        y = conv(x, w, bias[0] if bias else None, **kw)
    return _from_channels_first(y, layout)


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "maximum": lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)),
    "minimum": lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)),
}


def _run_binary(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    operands: list[Any] = list(args)
    if "scalar" in op.attrs:
        operands.insert(op.attrs["scalar_index"], op.attrs["scalar"])
    a, b = operands
    if op.attrs.get("alpha", 1) != 1:  # aten add/sub: a ± alpha * b
        b = b * op.attrs["alpha"]
    if op.attrs.get("rounding_mode") is not None:
        return torch.div(torch.as_tensor(a), b, rounding_mode=op.attrs["rounding_mode"])
    return _BINARY[op.kind](a, b)


def _run_index(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    indices: list[Any] = [None] * op.attrs["rank"]
    for k, index in zip(op.attrs["positions"], args[1:]):
        indices[k] = index
    return torch.ops.aten.index.Tensor(args[0], indices)


def _run_gather(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.gather(args[0], op.attrs["dim"], args[1])


def _run_cast(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return args[0].to(torch_dtype(op.attrs["dtype"]))


def _run_arg(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    """torch.max / min over `dim`: the index of the first max (min), as PyTorch picks it."""
    pick = torch.max if op.kind == "argmax" else torch.min
    return pick(args[0], op.attrs["dim"], keepdim=op.attrs["keepdim"]).indices


def _run_pad(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return F.pad(args[0], op.attrs["pad"], mode="constant", value=op.attrs["value"])


def _run_where(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    operands: list[Any] = list(args)
    for index, value in op.attrs.get("scalars", []):
        operands.insert(index, value)
    return torch.where(*operands)


def _run_gelu(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return F.gelu(args[0], approximate=op.attrs.get("approximate", "none"))


# an aten op of the kind's own name (`ATEN_ELEMENTWISE`): the very op the capture read
_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    **{kind: getattr(torch.ops.aten, kind).default for kind in ATEN_ELEMENTWISE}, "softplus": F.softplus,
}


def _run_clamp(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    # aten's own op, as the module ran it (hardtanh and relu6 are clamps too)
    return torch.clamp(args[0], op.attrs.get("min"), op.attrs.get("max"))


def _run_leaky_relu(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return F.leaky_relu(args[0], op.attrs["negative_slope"])


def _run_unary(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return _UNARY[op.kind](args[0])


def _run_pow(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.pow(args[0], op.attrs["exponent"])


def _optional(op: Op, args: list[torch.Tensor], names: tuple[str, ...]) -> dict[str, torch.Tensor | None]:
    """Split optional inputs (flagged has_<name> in attrs) off the front of args."""
    out: dict[str, torch.Tensor | None] = {}
    rest = list(args)
    for name in names:
        out[name] = rest.pop(0) if op.attrs.get(f"has_{name}", True) else None
    return out


def _run_softmax(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.softmax(args[0], op.attrs["dim"])


def _run_layer_norm(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    p = _optional(op, args[1:], ("weight", "bias"))
    return F.layer_norm(args[0], op.attrs["normalized_shape"], p["weight"], p["bias"], op.attrs["eps"])


def _run_batch_norm(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    p = _optional(op, args[1:], ("weight", "bias", "mean", "var"))
    x = args[0].movedim(op.attrs.get("axis", 1), 1)
    y = F.batch_norm(x, p["mean"], p["var"], p["weight"], p["bias"], False, 0.0, op.attrs["eps"])
    return y.movedim(1, op.attrs.get("axis", 1))


_REDUCE = {"mean": torch.mean, "sum": torch.sum, "amax": torch.amax, "amin": torch.amin}


def _run_reduce(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return _REDUCE[op.kind](args[0], dim=op.attrs["dims"], keepdim=op.attrs["keepdim"])


def _run_group_norm(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    rest = iter(args[1:])
    weight = next(rest) if op.attrs["has_weight"] else None
    bias = next(rest) if op.attrs["has_bias"] else None
    return F.group_norm(args[0], op.attrs["num_groups"], weight, bias, op.attrs["eps"])


def _run_roll(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.roll(args[0], op.attrs["shifts"], op.attrs["dims"])


def _run_upsample(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    packet, overload = op.attrs["aten"].split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)(args[0], *op.attrs["args"])


def _run_pool(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    a = op.attrs
    layout = a.get("layout", "NCHW")
    x = _to_channels_first(args[0], layout)
    integer = is_integer(x)
    if integer:  # max over int8 values is exact in float64
        x = _exact(x)
    if op.kind == "max_pool2d":
        y = F.max_pool2d(x, a["kernel"], a["stride"], a["padding"], a["dilation"], ceil_mode=a["ceil_mode"])
    else:
        y = F.avg_pool2d(x, a["kernel"], a["stride"], a["padding"], a["ceil_mode"], a["count_include_pad"],
                         a.get("divisor_override"))
    if integer:
        y = y.to(args[0].dtype)
    return _from_channels_first(y, layout)


def _run_adaptive_pool(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return F.adaptive_avg_pool2d(args[0], op.attrs["output_size"])


def _run_vector_norm(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    a = op.attrs
    return torch.linalg.vector_norm(args[0], a["ord"], a["dims"], a["keepdim"])


def _run_repeat(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return args[0].repeat(op.attrs["repeats"])


def _run_embedding(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    table, indices = args
    return F.embedding(indices, table)


def _run_sdpa(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    q, k, v, *mask = args
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask[0] if mask else None,
                                          is_causal=op.attrs.get("is_causal", False), scale=op.attrs.get("scale"))


def _run_reshape(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.reshape(args[0], op.attrs["shape"])


def _run_expand(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return args[0].expand(op.attrs["shape"])


def _run_permute(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return args[0].permute(op.attrs["dims"])


def _run_slice(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    a = op.attrs
    index: list[Any] = [slice(None)] * args[0].dim()
    index[a["dim"]] = slice(a["start"], a["end"], a.get("step", 1))
    return args[0][tuple(index)]


def _run_slice_scatter(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    a = op.attrs
    x, src = args
    if a.get("select"):  # select_scatter: src lacks the dim
        src = src.unsqueeze(a["dim"])
    return torch.slice_scatter(x, src.to(x.dtype), a["dim"], a["start"], a["end"], a.get("step", 1))


def _run_select(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return args[0].select(op.attrs["dim"], op.attrs["index"])


def _run_cat(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(args, op.attrs["dim"])


def _run_stack(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(args, op.attrs["dim"])


def _scaled(values: torch.Tensor, attrs: dict[str, Any]) -> torch.Tensor:
    """fp32(values) * scale: one new float32 tensor (a real layer's are hundreds of MB)."""
    scale = scale_tensor(attrs, tuple(values.shape))
    if values.dtype == torch.float32:
        return values * scale
    return values.to(torch.float32).mul_(scale)


def _saturate_int8(values: torch.Tensor) -> torch.Tensor:
    """clamp(round_half_even(values)) as int8; `values` (a temporary) is rounded in place."""
    return values.round_().clamp_(INT8_MIN, INT8_MAX).to(torch.int8)


# elements of float32 a quantize holds at a time (64 MB): an attention's scores are GBs, and
# a whole-tensor temporary beside them was the peak of a real layer's reference
QUANTIZE_SLAB = 1 << 24


def _to_int8(values: torch.Tensor, attrs: dict[str, Any], slab: int | None = None) -> torch.Tensor:
    """clamp(round_half_even(fp32(values) * scale)) as int8 (quantize, requantize), a slab of
    `slab` elements at a time along the first axis longer than 1, in one float32 buffer: each
    element takes the very operations of the whole-tensor form, so the bits are the same,
    without its float32 copy of the whole tensor."""
    slab = QUANTIZE_SLAB if slab is None else slab
    axis = next((d for d, n in enumerate(values.shape) if n > 1), None)
    if axis is None or values.numel() <= slab or values.dtype not in (torch.float32, torch.int32):
        return _saturate_int8(_scaled(values, attrs))
    scale = scale_tensor(attrs, tuple(values.shape))
    out = torch.empty_like(values, dtype=torch.int8)
    rows = values.shape[axis]
    step = max(1, slab * rows // values.numel())
    shape = list(values.shape)
    shape[axis] = step
    buffer = torch.empty(shape, dtype=torch.float32)
    for start in range(0, rows, step):
        n = min(step, rows - start)
        s = scale.narrow(axis, start, n) if scale.dim() and scale.shape[axis] > 1 else scale
        scaled = torch.mul(values.narrow(axis, start, n), s, out=buffer.narrow(axis, 0, n))  # fp32(x) * s
        out.narrow(axis, start, n).copy_(scaled.round_().clamp_(INT8_MIN, INT8_MAX))  # integers: cast exact
    return out


def _run_quantize(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return _to_int8(args[0], op.attrs)


def _run_requantize(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return _to_int8(args[0], op.attrs)


def _run_dequantize(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return _scaled(args[0], op.attrs)


# --- a mixture of experts' routing (dse.workload.moe) ---

def _routed(index: torch.Tensor, op: Op) -> torch.Tensor:
    """Positions (in top_k_index's flat order, ascending) of the choices of op's expert;
    exactly the recorded count, else the routing is not the captured one."""
    positions = (index.reshape(-1) == op.attrs["expert"]).nonzero().reshape(-1)
    if positions.numel() != op.attrs["count"]:
        raise ValueError(f"{op.name}: the router sends {positions.numel()} tokens to expert {op.attrs['expert']}, "
                         f"the captured routing {op.attrs['count']} (an expert's token count is fixed at capture)")
    return positions


def _run_topk(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    a = op.attrs
    values, indices = torch.topk(args[0], a["k"], dim=a["dim"], largest=a["largest"], sorted=a["sorted"])
    return values if a["item"] == 0 else indices


def _run_sort(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    a = op.attrs
    values, indices = torch.sort(args[0], dim=a["dim"], descending=a["descending"], stable=a["stable"])
    return values if a["item"] == 0 else indices


def _run_aten_call(kind: str, call: AtenCall) -> Callable[[Op, list[torch.Tensor]], torch.Tensor]:
    """The aten call an `AtenCall` op was read from, made again with its attributes: each at
    its position, or as the keyword of its name (a dtype by its torch dtype)."""
    aten = getattr(getattr(torch.ops.aten, kind), call.overload)
    placed = sorted((attr for attr in call.attrs if attr.at is not None), key=lambda attr: attr.at)
    keywords = [attr for attr in call.attrs if attr.at is None]

    def run(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
        def value(attr):
            given = op.attrs.get(attr.name)
            return torch_dtype(given) if attr.rule == "dtype" and given is not None else given
        return aten(*args[:call.inputs], *(value(attr) for attr in placed),
                    **{attr.name: value(attr) for attr in keywords})
    return run


def _run_scatter(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    x, index, *src = args
    if src:
        return torch.scatter(x, op.attrs["dim"], index, src[0].to(x.dtype))
    return torch.scatter(x, op.attrs["dim"], index, op.attrs["value"])


def _run_scatter_add(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    x, index, src = args
    return torch.scatter_add(x, op.attrs["dim"], index, src.to(x.dtype))


def _run_moe_tokens(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.div(_routed(args[0], op), op.attrs["top_k"], rounding_mode="floor")


def _run_moe_weights(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return args[1].reshape(-1)[_routed(args[0], op)].reshape(-1, 1)


def _run_index_add(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    acc, index, source = args
    return acc.index_add(op.attrs["dim"], index, source.to(acc.dtype))


_ROUTING = {"topk": _run_topk, "sort": _run_sort, "scatter": _run_scatter, "scatter_add": _run_scatter_add,
            "bitwise_not": lambda op, args: torch.bitwise_not(args[0]), "moe_tokens": _run_moe_tokens,
            "moe_weights": _run_moe_weights, "index_add": _run_index_add,
            # one aten call with attributes of its own (`ATEN_CALLS`): the very call the capture read
            **{kind: _run_aten_call(kind, call) for kind, call in ATEN_CALLS.items()}}


INTERPRETERS: dict[str, Callable[[Op, list[torch.Tensor]], torch.Tensor]] = {
    "linear": _run_linear,
    "matmul": _run_matmul,
    **{kind: _run_conv for kind in CONV_KINDS},
    **{kind: _run_binary for kind in BINARY_KINDS},
    **{kind: _run_unary for kind in _UNARY},
    "gelu": _run_gelu,
    "clamp": _run_clamp,
    "leaky_relu": _run_leaky_relu,
    "pow": _run_pow,
    "softmax": _run_softmax,
    "layer_norm": _run_layer_norm,
    "batch_norm": _run_batch_norm,
    **{kind: _run_reduce for kind in REDUCE_KINDS},
    **{kind: _run_pool for kind in POOL_KINDS},
    "adaptive_avg_pool2d": _run_adaptive_pool,
    "vector_norm": _run_vector_norm,
    "repeat": _run_repeat,
    "embedding": _run_embedding,
    "sdpa": _run_sdpa,
    "where": _run_where,
    "pad": _run_pad,
    "group_norm": _run_group_norm,
    "roll": _run_roll,
    "upsample": _run_upsample,
    "index": _run_index,
    "gather": _run_gather,
    "cast": _run_cast,
    **{kind: _run_arg for kind in ARG_KINDS},
    "reshape": _run_reshape,
    "expand": _run_expand,
    "permute": _run_permute,
    "slice": _run_slice,
    "slice_scatter": _run_slice_scatter,
    "select": _run_select,
    "cat": _run_cat,
    "stack": _run_stack,
    "quantize": _run_quantize,
    "requantize": _run_requantize,
    "dequantize": _run_dequantize,
    "scan": lambda op, args: run_scan(op, args, INTERPRETERS),
    "rnn_cell": run_rnn_cell,
    **_ROUTING,
}
_INTERPRETERS = INTERPRETERS  # the name earlier code used
assert set(INTERPRETERS) == set(KINDS), set(KINDS) ^ set(INTERPRETERS)
