"""Symmetric int8 quantization of the matrix products, and the contract of the quantized graph.

What the step does
------------------
Every linear, matmul, conv1d and conv2d whose operands are float32 becomes an integer
product on the matrix Ball; everything else (norms, softmax, residual adds, RoPE, GELU,
...) stays float32 and runs on the core:

    xq  = quantize(x)                    float32 -> int8, scale calibrated on the example inputs
    wq  = (offline)                      a weight is quantized once and stored as int8
    acc = linear | matmul | conv(xq, wq, bias_q?)    int8 x int8 -> int32
    y   = dequantize(acc)                int32 -> float32, when a float op reads the result
    yq  = requantize(acc)                int32 -> int8, when the next reader is another
                                         product (requantization between layers)

ReLU and max pooling that sit between a product and the next product run on the int8
values after `requantize` (both commute with a positive scale and with rounding), so an
MLP or a conv stack stays integer from one Ball op to the next.

Scales (HARDWARE.md: symmetric int8, no zero point, scale = 127 / absmax)
-----------------------------------------------------------------------
A scale `s` is the fp32 multiplier that takes a real value to its integer: q ~ x * s,
x ~ q / s, with s = fp32(127 / absmax) computed in float64 and rounded once (absmax = 0
gives s = 1). absmax is calibrated on the example inputs (the float graph's values).
Granularity (step options):
- activations = "tensor" (one scale) or "strip": one scale per 16 rows of a product's
  left operand A[..., M, K] (along M) and per 16 columns of an activation right operand
  B[..., K, N] (along N). A convolution's input is always per tensor: one input pixel
  feeds rows of several strips of the im2col matrix.
  Or "channel": one scale per input channel (the reduction axis K) of a product by a
  weight (linear, matmul, conv), the scale moved into the weight so that it still factors out of
  the sum (SmoothQuant's migration, taken the whole way for depthwise convs):
      d[k] = t[k]^a / wmax[k]^(1 - a)     (t: the channel's threshold, wmax: its weights'
                                           absmax, a = the `migration` option, 0..1)
      S = fp32(127 / max_k(t[k] / d[k])), sA[k] = fp32(S / d[k])
      xq[k] = quantize(x[k]) with sA[k];  W'[n, k] = W[n, k] * S / sA[k], quantized per
                                           output channel as any weight
  so acc[n] = sum_k xq[k] W'q[n, k] ~ S * sW[n] * sum_k x[k] W[n, k]: the product's A
  scale is the one S. In a depthwise conv each output channel reads one input channel, so
  its own weight scale takes d whole: no precision is lost on the weights, and a = 1 gives
  every channel the full int8 range (with per-channel weights, a depthwise conv always
  takes a = 1). Products by an activation (attention's) keep a per-tensor A. The default
  a = 0.5 is SmoothQuant's; no value was best for all four mobile networks of
  `bench/bench_calibration.py`, which measures the choices.
- weights = "tensor", "strip" (one scale per 16 output channels) or "channel" (one per
  output channel). The output channel axis is N: W's rows for linear [N, K], the last
  axis of a pre-transposed [K, N] weight, axis 0 of OIHW / OIW conv weights and the last
  axis of HWIO / WIO ones.
Every scale is constant along the reduction axis K, so it factors out of the sum.
Calibration rule of the activations (step option `calibration`; weights always absmax):
"absmax" (nothing clips), "percentile" (t = the `percentile`-th percentile of |x|, the
rare largest values clip) or "mse" (the t of least expected int8 error over |x|'s
histogram, `thresholds`); s = fp32(127 / t) as above, t in place of absmax.

The ops, their dtypes and attrs
-------------------------------
A scale in attrs is `scale` (a float, or a list nested once per entry of `scale_axes`),
`scale_axes` (ascending tensor axes) and `scale_groups` (elements per entry along each
axis: 1 per channel, 16 per strip); `dse.workload.graph.scale_tensor` expands it.

- quantize: float32 -> int8.   q = clamp(round_half_even(x * s), -128, 127)
  where x * s is one IEEE fp32 multiplication. attrs also: granularity, role ("A" / "B").
- linear / matmul / conv1d / conv2d with int8 operands: int32 output,
  acc = (sum_k a * b + bias_q) mod 2**32 (two's complement wraparound: any summation
  order gives the same bits). attrs also: dtype="int8", acc_dtype="int32",
  a_granularity, b_granularity. A linear / matmul keeps its M, N, K, batch, has_bias.
  The bias is an int32 weight, bias_q[n] = round_half_even(b[n] * sA * sB[n]) in float64,
  preloaded into the accumulator, when every |bias_q| leaves room for the K products:
  |bias_q| <= 2**31 - 1 - K * 128 * 128, so no sum can wrap. Otherwise (activations tiny
  next to the bias, as in a random-weight GoogLeNet) and when A has several scales (strips)
  the float bias is added after `dequantize` instead. A product with K * 128 * 128 > 2**31 - 1
  could wrap whatever its scales: the step refuses it (`AccumulatorOverflow`, naming the op).
- requantize: int32 -> int8.   q = clamp(round_half_even(fp32(acc) * m), -128, 127)
  fp32(acc) rounds to nearest even (exact below 2**24); m = fp32(s_next * m_deq), float64
  product of the next quantize's scale and the dequantize multiplier below.
- dequantize: int32 -> float32.   y = fp32(acc) * m,   m = fp32(1 / (sA * sB)) from the
  float64 product of the operands' fp32 scales; with strips on A and channels on B, m has
  one entry per (row strip, channel): scale_axes [M axis, N axis].
Every multiplier is stored as the exact fp32 value to use: an integer implementation
(the emulator's Fp2Int / Int2Fp Balls, a numpy loop) reads it, never recomputes it.

The PyTorch reference of the quantized computation
--------------------------------------------------
`Graph.run` on the quantized graph *is* the PyTorch reference: integer products are
computed in float64 (exact for int8 operands: every partial sum is an integer far below
2**53) and wrapped to int32; conversions follow the formulas above. `integer_reference`
recomputes the same graph independently with numpy integer arithmetic (int64 products
wrapped to int32, explicit fp32 conversions, its own scale expansion), and the step's
check requires the two to agree bit for bit on every integer tensor and every output.
Against the float PyTorch module the quantized graph is held to a declared tolerance
(`tolerance`, relative to the largest reference magnitude of each output).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dse.frontend.quantize_scan import quantize_scan
from dse.frontend.rewrite import Rewriter, StepError
from dse.workload.graph import (
    CHANNELS_LAST,
    CHANNELS_LAST_WEIGHTS,
    CONV_KINDS,
    INT8_MAX,
    INT8_MIN,
    INTERPRETERS,
    MATMUL_KINDS,
    Graph,
    Op,
    weight_array,
)

CALIBRATIONS = ("absmax", "percentile", "mse")
OPTIONS = {
    "activations": (str, "tensor", ("tensor", "strip", "channel")),
    "weights": (str, "channel", ("tensor", "strip", "channel")),
    "calibration": (str, "absmax", CALIBRATIONS),
    "percentile": (float, 99.99),
    "migration": (float, 0.5),
    "fuse": (bool, True),
    "tolerance": (float, 0.05),
}
STRIP = 16
_GROUP = {"strip": STRIP, "channel": 1}
_FUSABLE = ("relu", "max_pool2d")


@dataclass(frozen=True)
class Scale:
    """The scale of one quantized operand: fp32 values along one axis (or one value)."""

    values: np.ndarray  # float32, 1-D
    axis: int | None
    group: int
    granularity: str

    def attrs(self) -> dict[str, Any]:
        if self.axis is None:
            return {"scale": float(self.values[0]), "scale_axes": [], "scale_groups": []}
        return {"scale": self.values.tolist(), "scale_axes": [self.axis], "scale_groups": [self.group]}


def calibrate(values: np.ndarray, axis: int | None, granularity: str, rule: str = "absmax",
              percentile: float = 99.99) -> Scale:
    """scale = fp32(127 / t) per tensor, per `STRIP` entries or per entry along `axis`, with
    the clipping threshold t of `rule` (`thresholds`) over each group's values."""
    values = np.asarray(values)
    if granularity == "tensor" or axis is None or values.ndim == 0:
        absmax, axis, group, granularity = thresholds(values.reshape(1, -1), rule, percentile), None, 0, "tensor"
    elif rule == "absmax":
        group = _GROUP[granularity]
        per_index = _absmax_along(values, axis)
        padded = np.concatenate([per_index, np.zeros(-len(per_index) % group)])
        absmax = padded.reshape(-1, group).max(axis=1)
    else:
        group = _GROUP[granularity]
        rows = np.moveaxis(values, axis, 0).reshape(values.shape[axis], -1)
        absmax = np.concatenate([thresholds(rows[start:start + group].reshape(1, -1), rule, percentile)
                                 for start in range(0, len(rows), group)])
    # A magnitude so small that 127 / absmax is no finite fp32 (denormal values: zero to int8
    # at any usable scale) takes scale 1, as an all-zero tensor does.
    usable = absmax > 127.0 / np.finfo(np.float32).max
    scale = np.where(usable, 127.0 / np.where(usable, absmax, 1.0), 1.0).astype(np.float32)
    return Scale(scale, axis, group, granularity)


MSE_BINS = 2048  # histogram of |x| the MSE rule reads
MSE_CANDIDATES = 128  # thresholds it tries: absmax * k / 128, k = 1..128


def thresholds(rows: np.ndarray, rule: str = "absmax", percentile: float = 99.99) -> np.ndarray:
    """The clipping threshold t of each row (scale = 127 / t), float64, by the calibration rule:
    - absmax: max |x| (nothing clips);
    - percentile: the `percentile`-th percentile of |x| (the largest values clip);
    - mse: the t among absmax * k / 128 (k = 1..128) of least expected squared error of
      int8 rounding over the row's |x| histogram (2048 bins): (t / 127)^2 / 12 for each value
      within t (uniform rounding noise), (|x| - t)^2 for each value clipped."""
    absmax = _absmax(rows)
    if rule == "absmax":
        return absmax
    if rule == "percentile":
        return np.array([np.percentile(np.abs(row), percentile) if row.size else 0.0 for row in rows],
                        dtype=np.float64)
    if rule != "mse":
        raise ValueError(f"calibration rule {rule!r}; allowed: {', '.join(CALIBRATIONS)}")
    out = np.zeros(len(rows), dtype=np.float64)
    for i, (row, top) in enumerate(zip(rows, absmax)):
        if top <= 0:
            continue
        counts, edges = np.histogram(np.abs(row), bins=MSE_BINS, range=(0.0, top))
        centers = (edges[:-1] + edges[1:]) / 2
        candidates = top * np.arange(1, MSE_CANDIDATES + 1) / MSE_CANDIDATES
        within = centers[None, :] <= candidates[:, None]
        error = np.where(within, (candidates[:, None] / 127) ** 2 / 12, (centers[None, :] - candidates[:, None]) ** 2)
        out[i] = candidates[int(np.argmin(error @ counts))]
    return out


def _absmax(rows: np.ndarray) -> np.ndarray:
    """max |x| of each row, in float64 (0 for an empty row). max(max x, -min x): exact, and
    no |x| or float64 copy of a tensor that may be hundreds of MB."""
    return np.maximum(rows.max(axis=1, initial=0), -rows.min(axis=1, initial=0)).astype(np.float64)


def _absmax_along(values: np.ndarray, axis: int) -> np.ndarray:
    """`_absmax` of each index along `axis` (the reduction over every other axis), in place:
    no copy of a weight moved to rows (a real layer's projections are hundreds of MB each)."""
    others = tuple(d for d in range(values.ndim) if d != axis)
    return np.maximum(values.max(axis=others, initial=0), -values.min(axis=others, initial=0)).astype(np.float64)


def _quantize_array(array: np.ndarray, scale: Scale) -> np.ndarray:
    """Offline quantization of a weight with the very formula of the quantize op."""
    op = Op("offline", "quantize", [], [], scale.attrs(), "", None)
    return weight_array(INTERPRETERS["quantize"](op, [torch.from_numpy(np.asarray(array, order="C"))]))


def _per_channel(scale: Scale, channels: int) -> np.ndarray:
    if scale.axis is None:
        return np.full(channels, scale.values[0], dtype=np.float64)
    return scale.values.astype(np.float64)[np.arange(channels) // scale.group]


@dataclass(frozen=True)
class _Roles:
    """Where the scales of a product's operands sit, on the operands and on the output."""

    a_axis: int | None  # axis of A along which its scale may vary (M), None: per tensor only
    b_axis: int  # axis of B along which its scale varies (N)
    out_a_axis: int | None
    out_b_axis: int


def _roles(op: Op, graph: Graph) -> _Roles | None:
    a, b = (graph.tensors[n].shape for n in op.inputs[:2])
    out = graph.tensors[op.outputs[0]].shape
    if op.kind == "linear":
        return _Roles(len(a) - 2 if len(a) >= 2 else None, 0, len(out) - 2 if len(a) >= 2 else None, len(out) - 1)
    if op.kind == "matmul":
        if len(b) < 2 or op.attrs.get("alpha", 1) != 1 or op.attrs.get("beta", 1) != 1:
            return None
        rows = len(a) >= 2
        return _Roles(len(a) - 2 if rows else None, len(b) - 1, len(out) - 2 if rows else None, len(out) - 1)
    weight_last = op.attrs.get("weight_layout") in CHANNELS_LAST_WEIGHTS
    out_channel = len(out) - 1 if op.attrs.get("layout") in CHANNELS_LAST else 1
    return _Roles(None, len(b) - 1 if weight_last else 0, None, out_channel)


def _channel_axes(op: Op, graph: Graph) -> tuple[int, int, int]:
    """A product by a weight: the input-channel (K) axis of its activation and of its
    weight, and its groups (a grouped conv's output channel n reads input channels
    n // (N / groups) * I + i, i < I)."""
    x_rank, w_rank = len(graph.tensors[op.inputs[0]].shape), len(graph.tensors[op.inputs[1]].shape)
    if op.kind == "linear":
        return x_rank - 1, 1, 1
    if op.kind == "matmul":  # B[..., K, N]
        return x_rank - 1, w_rank - 2, 1
    x_axis = x_rank - 1 if op.attrs.get("layout") in CHANNELS_LAST else 1
    w_axis = w_rank - 2 if op.attrs.get("weight_layout") in CHANNELS_LAST_WEIGHTS else 1
    return x_axis, w_axis, int(op.attrs.get("groups", 1))


def _multiplier(out_axes: list[tuple[int, Scale]], numerator: float = 1.0) -> dict[str, Any]:
    """fp32(numerator / (sA * sB)) over the output axes the operand scales vary along."""
    varying = sorted((axis, scale) for axis, scale in out_axes if scale.axis is not None)
    fixed = np.prod([float(s.values[0]) for _, s in out_axes if s.axis is None] or [1.0])
    grid = np.ones([len(s.values) for _, s in varying], dtype=np.float64) * fixed
    for i, (_, scale) in enumerate(varying):
        shape = [1] * len(varying)
        shape[i] = -1
        grid = grid * scale.values.astype(np.float64).reshape(shape)
    m = (numerator / grid).astype(np.float32)
    return {"scale": m.tolist() if varying else float(m), "scale_axes": [a for a, _ in varying],
            "scale_groups": [s.group for _, s in varying]}


class _Quantizer:
    def __init__(self, graph: Graph, values: dict[str, torch.Tensor], activations: str, weights: str,
                 calibration: str = "absmax", percentile: float = 99.99, migration: float = 0.5):
        self.graph = graph
        self.migration = migration
        self.values = values
        self.activations = activations
        self.weights = weights
        self.calibration, self.percentile = calibration, percentile  # the activations' rule (weights: absmax)
        self.rw = Rewriter(graph, "quantize")
        self.quantized: dict[tuple, tuple[str, Scale]] = {}
        self.products = 0

    def operand(self, name: str, axis: int | None, role: str, source: str,
                activation_granularity: str | None = None) -> tuple[str, Scale]:
        """The int8 tensor for operand `name` and its scale (weights offline, activations by quantize ops)."""
        graph, rw = self.graph, self.rw
        if name in graph.weights:
            granularity = self.weights if axis is not None else "tensor"
            key = ("weight", name, axis, granularity)
            if key not in self.quantized:
                scale = calibrate(graph.weights[name], axis, granularity)
                self.quantized[key] = (rw.weight(f"{name}_int8", _quantize_array(graph.weights[name], scale)), scale)
            return self.quantized[key]
        granularity = activation_granularity or self.activations
        key = ("activation", name, axis if granularity != "tensor" else None, granularity)
        if key not in self.quantized:
            scale = calibrate(self.values[name].numpy(), axis, granularity, self.calibration, self.percentile)
            self.quantized[key] = (self.quantize_op(name, scale, role, source), scale)
        return self.quantized[key]

    def quantize_op(self, name: str, scale: Scale, role: str, source: str) -> str:
        """The quantize op of activation `name` with `scale`; its int8 tensor."""
        return self.rw.emit("quantize", [name], self.graph.tensors[name].shape, "int8",
                            {**scale.attrs(), "granularity": scale.granularity, "role": role}, source,
                            hint=f"{name}_int8")

    def migrated(self, op: Op, roles: _Roles) -> tuple[tuple[str, Scale], tuple[str, Scale]]:
        """A per-input-channel A scale moved into the weight (the module docstring's
        "channel"): the int8 A and int8 W', with the A scale that factors out (the one S)."""
        graph, rw = self.graph, self.rw
        x_name, w_name = op.inputs[:2]
        x = self.values[x_name].numpy()
        w = graph.weights[w_name].astype(np.float64)
        x_axis, w_in_axis, groups = _channel_axes(op, graph)
        channels = x.shape[x_axis]
        t = thresholds(np.moveaxis(x, x_axis, 0).reshape(channels, -1), self.calibration, self.percentile)
        # each input channel's weights: W[n, i] of the output channels of its group
        w_in = np.moveaxis(w, (roles.b_axis, w_in_axis), (0, 1))  # [N, I, ...]
        per_group = w_in.shape[0] // groups
        wmax = np.abs(w_in.reshape(groups, per_group, w_in.shape[1], -1)).max(axis=(1, 3)).reshape(-1)
        # a depthwise conv's output channel reads one input channel: its own weight scale takes
        # d whole, so the activations' scales are moved entirely (every channel's full range)
        depthwise = w_in.shape[1] == 1 and groups == channels and self.weights == "channel"
        alpha = 1.0 if depthwise else self.migration
        tiny = 127.0 / np.finfo(np.float32).max  # below it no fp32 scale is finite (as `calibrate`)
        live, seen = (t > tiny) & (wmax > 0), t > tiny
        d = np.ones(channels)
        d[live] = t[live] ** alpha / wmax[live] ** (1 - alpha)
        top = float(np.max(t[live] / d[live], initial=0.0))
        if top > 0:
            # a channel with no weight: its values within range, whatever they are
            d[seen & ~live] = t[seen & ~live] / top
            # a channel silent on the calibration inputs: the smallest weight factor, so that
            # its weights do not widen the scale of the weights that matter
            d[~seen] = d[seen].min()
        S = np.float32(127.0 / top) if top > tiny else np.float32(1.0)
        sa_channel = (np.float64(S) / d).astype(np.float32)
        key = ("activation", x_name, "channel", sa_channel.tobytes())
        if key not in self.quantized:
            scale = Scale(sa_channel, x_axis, 1, "channel")
            self.quantized[key] = (self.quantize_op(x_name, scale, "A", op.source), scale)
        qa = self.quantized[key][0]
        # W'[n, i] = W[n, i] * S / sA[channel of (n, i)]
        factor = np.float64(S) / sa_channel.astype(np.float64)  # [C], C = groups * I
        shape = [1] * w.ndim
        grid = factor.reshape(groups, 1, w_in.shape[1])  # [group, 1, I]
        per_n = np.broadcast_to(grid, (groups, per_group, w_in.shape[1])).reshape(w_in.shape[0], w_in.shape[1])
        shape[roles.b_axis], shape[w_in_axis] = per_n.shape
        folded = w * (per_n if roles.b_axis < w_in_axis else per_n.T).reshape(shape)
        sb = calibrate(folded, roles.b_axis, self.weights)
        qb = rw.weight(f"{w_name}_int8", _quantize_array(folded.astype(np.float32), sb))
        return (qa, Scale(np.array([S], dtype=np.float32), None, 0, "channel")), (qb, sb)

    def product(self, op: Op) -> None:
        graph, rw = self.graph, self.rw
        roles = _roles(op, graph)
        if roles is None or any(graph.tensors[n].dtype != "float32" for n in op.inputs):
            rw.keep(op)
            return
        is_conv = op.kind in CONV_KINDS
        if (self.activations == "channel" and op.inputs[0] not in graph.weights and op.inputs[1] in graph.weights
                and op.kind in ("linear", "matmul", *CONV_KINDS)):
            (qa, sa), (qb, sb) = self.migrated(op, roles)
        else:
            granularity = "tensor" if is_conv or self.activations == "channel" else None
            qa, sa = self.operand(op.inputs[0], roles.a_axis, "A", op.source, granularity)
            qb, sb = self.operand(op.inputs[1], roles.b_axis, "B", op.source)
        out = op.outputs[0]
        spec = graph.tensors[out]
        inputs = [qa, qb]
        bias = op.inputs[2] if op.attrs.get("has_bias") else None
        float_bias = None
        reduction = _reduction_length(op, graph)
        if reduction * INT8_PRODUCT_MAX > INT32_MAX:
            raise AccumulatorOverflow(op, reduction)
        if bias is not None:
            bias_q = None
            if sa.axis is None and bias in graph.weights:
                channels = graph.tensors[bias].shape[-1]
                exact = graph.weights[bias].astype(np.float64) * float(sa.values[0]) * _per_channel(sb, channels)
                # The accumulator starts at bias_q and then takes `reduction` products of at most
                # 128 * 128 each: with no room for them, the bias goes in after dequantize, in
                # float (a layer whose activations are tiny next to its bias: GoogLeNet's).
                if np.all(np.abs(exact) <= INT32_MAX - reduction * INT8_PRODUCT_MAX):
                    bias_q = np.rint(exact).astype(np.int32)
            if bias_q is not None:
                inputs.append(rw.weight(f"{bias}_int32", bias_q))
            else:
                float_bias = bias
        attrs = {**op.attrs, "has_bias": len(inputs) == 3, "dtype": "int8", "acc_dtype": "int32",
                 "a_granularity": sa.granularity, "b_granularity": sb.granularity}
        acc = rw.emit(op.kind, inputs, spec.shape, "int32", attrs, op.source, hint=f"{out}_acc")
        multiplier = _multiplier([(roles.out_a_axis, sa), (roles.out_b_axis, sb)])
        granularity = f"A:{sa.granularity} B:{sb.granularity}"
        if float_bias is None:
            rw.emit("dequantize", [acc], spec.shape, "float32", {**multiplier, "granularity": granularity},
                    op.source, name=out)
        else:
            deq = rw.emit("dequantize", [acc], spec.shape, "float32", {**multiplier, "granularity": granularity},
                          op.source, hint=f"{out}_dequant")
            rw.emit("add", [deq, float_bias], spec.shape, "float32", {}, op.source, name=out)
        self.products += 1


INT32_MAX = 2**31 - 1
INT8_PRODUCT_MAX = 128 * 128  # |a * b| for int8 a, b: (-128) * (-128)


class AccumulatorOverflow(ValueError):
    """A product whose int32 accumulator can overflow whatever the scales: a reduction of
    2**31 / (128 * 128) = 131,072 products or more."""

    def __init__(self, op: Op, reduction: int):
        self.op, self.reduction = op, reduction
        super().__init__(f"{op.kind} {op.name} ({op.source or 'no source line'}): its int32 accumulator can "
                         f"overflow: {reduction:,} int8 products of up to {INT8_PRODUCT_MAX:,} each exceed "
                         f"{INT32_MAX:,}; split the reduction (K) or keep this product in float")


def _reduction_length(op: Op, graph: Graph) -> int:
    """K: how many int8 products each accumulator sums (a conv's is C_in / groups x kernel)."""
    weight = graph.tensors[op.inputs[1]].shape
    if op.kind in CONV_KINDS:
        out_channels = weight[-1] if op.attrs.get("weight_layout") in CHANNELS_LAST_WEIGHTS else weight[0]
        return int(np.prod(weight)) // int(out_channels)
    a = graph.tensors[op.inputs[0]].shape
    return int(a[-1])


def _fuse_requantize(graph: Graph) -> tuple[Graph, int]:
    """quantize(f(...(dequantize(acc)))) with f in relu / max_pool2d -> f(...(requantize(acc)))."""
    producers = graph.producers()
    plans: dict[str, tuple[Op, list[Op]]] = {}
    for q in graph.ops_of_kind("quantize"):
        chain: list[Op] = []
        source = producers.get(q.inputs[0])
        while source is not None and source.kind in _FUSABLE:
            chain.append(source)
            source = producers.get(source.inputs[0])
        if source is None or source.kind != "dequantize" or graph.tensors[source.inputs[0]].dtype != "int32":
            continue
        if _compatible(q, source, chain, graph):
            plans[q.name] = (source, chain[::-1])
    rw = Rewriter(graph, "quantize")
    for op in graph.ops:
        if op.name not in plans:
            rw.keep(op)
            continue
        deq, chain = plans[op.name]
        acc = deq.inputs[0]
        attrs = {**_combine(op.attrs, deq.attrs), "granularity": deq.attrs.get("granularity", "")}
        # the last int8 value takes the quantize op's name: readers see the same tensor name
        value = rw.emit("requantize", [acc], graph.tensors[acc].shape, "int8", attrs, op.source,
                        **({"hint": f"{acc.removesuffix('_acc')}_requant"} if chain else {"name": op.outputs[0]}))
        for i, f in enumerate(chain):
            last = {"name": op.outputs[0]} if i == len(chain) - 1 else {"hint": f"{f.outputs[0]}_int8"}
            value = rw.emit(f.kind, [value], graph.tensors[f.outputs[0]].shape, "int8", dict(f.attrs), f.source,
                            **last)
    return rw.finish(), len(plans)


def _compatible(q: Op, deq: Op, chain: list[Op], graph: Graph) -> bool:
    deq_axes = dict(zip(deq.attrs["scale_axes"], deq.attrs["scale_groups"]))
    for f in chain:
        if f.kind == "max_pool2d":
            rank = len(graph.tensors[f.inputs[0]].shape)
            pooled = {1, 2} if f.attrs.get("layout") == "NHWC" else {rank - 2, rank - 1}
            if pooled & set(deq_axes):
                return False
    return all(deq_axes.get(axis) == group for axis, group in zip(q.attrs["scale_axes"], q.attrs["scale_groups"]))


def _combine(q_attrs: dict[str, Any], deq_attrs: dict[str, Any]) -> dict[str, Any]:
    """m = fp32(s_next * m_deq) over the dequantize multiplier's axes."""
    m = np.asarray(deq_attrs["scale"], dtype=np.float64)
    s = np.asarray(q_attrs["scale"], dtype=np.float64)
    if q_attrs["scale_axes"]:
        position = deq_attrs["scale_axes"].index(q_attrs["scale_axes"][0])
        shape = [1] * m.ndim
        shape[position] = -1
        s = s.reshape(shape)
    combined = (m * s).astype(np.float32)
    return {"scale": combined.tolist() if combined.ndim else float(combined),
            "scale_axes": list(deq_attrs["scale_axes"]), "scale_groups": list(deq_attrs["scale_groups"])}


def run(graph: Graph, ctx, activations: str = "tensor", weights: str = "channel", fuse: bool = True,
        tolerance: float = 0.05, calibration: str = "absmax", percentile: float = 99.99,
        migration: float = 0.5) -> Graph:
    if not 0 < percentile <= 100:
        raise StepError(f"percentile {percentile} out of range (0, 100]")
    if not 0 <= migration <= 1:
        raise StepError(f"migration {migration} out of range [0, 1]")
    values = ctx.trace(graph)  # calibration: the float graph on the example inputs (the last check's)
    quantizer = _Quantizer(graph, values, activations, weights, calibration, percentile, migration)
    for op in graph.ops:
        if op.kind in MATMUL_KINDS or op.kind in CONV_KINDS:
            quantizer.product(op)
        elif op.kind == "scan" and "cell" in op.attrs:  # its recurrent product (`dse.frontend.quantize_scan`)
            quantize_scan(quantizer, op, calibrate, _quantize_array)
        else:
            quantizer.rw.keep(op)
    result = quantizer.rw.finish()
    fused = 0
    if fuse:
        result, fused = _fuse_requantize(result)
    ctx.details.update(
        products=quantizer.products, requantize=len(result.ops_of_kind("requantize")),
        quantize=len(result.ops_of_kind("quantize")), dequantize=len(result.ops_of_kind("dequantize")),
        activations=activations, weights=weights, calibration=calibration,
        **({"percentile": percentile} if calibration == "percentile" else {}),
        **({"migration": migration} if activations == "channel" else {}),
    )
    return result


# --- an independent integer implementation, to hold the PyTorch reference to bit-exactness ---

def _np_scale(attrs: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    values = np.asarray(attrs["scale"], dtype=np.float32)
    axes, groups = attrs.get("scale_axes", []), attrs.get("scale_groups", [])
    if not axes:
        return values
    for i, (axis, group) in enumerate(zip(axes, groups)):
        values = np.repeat(values, group, axis=i).take(np.arange(shape[axis]), axis=i)
    return values.reshape([shape[a] if a in axes else 1 for a in range(len(shape))])


def _np_quantize_op(kind: str, values: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """quantize / requantize (saturated to int8) or dequantize of `values` by `scale`
    (broadcast to them): fp32(values) * scale in one new float32 array (a real layer's are
    hundreds of MB), rounded in place. The integer path's one arithmetic for the three, whole
    (`_integer_op`) or a block at a time (`_agrees_in_blocks`)."""
    scaled = values.astype(np.float32)  # a copy even of float32: scaled in place below
    scaled *= scale
    return scaled if kind == "dequantize" else _np_saturate(scaled)


def _np_saturate(values: np.ndarray) -> np.ndarray:
    """clamp(round_half_even(values)) as int8; `values` (a temporary) is rounded in place."""
    np.rint(values, out=values)
    np.clip(values, INT8_MIN, INT8_MAX, out=values)
    return values.astype(np.int8)


def _np_wrap(values: np.ndarray) -> np.ndarray:
    return (((values.astype(np.int64) + 2**31) % 2**32) - 2**31).astype(np.int32)


INT32_MAX = 2**31 - 1
# A float sum of integers is exact in any summation order while every partial sum is an
# integer the float type holds: below 2**24 in float32, 2**53 in float64. So an integer
# product can use BLAS (numpy's int64 matmul has no BLAS path and is ~50x slower on a real
# layer), in float32 (half the memory) when its bound allows.
FLOAT32_EXACT = 2**24
FLOAT64_EXACT = 2**53


def _magnitude_bound(x: np.ndarray) -> int:
    """An upper bound of |x| (int8: the dtype's; wider integers: the data's)."""
    if x.dtype == np.int8:
        return 128
    return int(np.abs(x.astype(np.int64)).max()) if x.size else 0


def _np_int_product(product, a: np.ndarray, b: np.ndarray, k: int) -> tuple[np.ndarray, int | None]:
    """`product` (matmul, tensordot) of integer arrays, exact: float BLAS where exact, else
    int64; and the bound of every value (None: not known to fit int32)."""
    bound = k * _magnitude_bound(a) * _magnitude_bound(b)
    if bound < FLOAT64_EXACT:
        exact = np.float32 if bound < FLOAT32_EXACT else np.float64
        values = product(a.astype(exact), b.astype(exact))
        return (values.astype(np.int32), bound) if bound <= INT32_MAX else (values.astype(np.int64), None)
    return product(a.astype(np.int64), b.astype(np.int64)), None


def _np_accumulate(acc: np.ndarray, bound: int | None, bias: np.ndarray | None) -> np.ndarray:
    """(acc + bias) mod 2**32 as int32; in int32 when no sum can leave it (no int64 copies)."""
    if bound is not None and (bias is None or bound + _magnitude_bound(bias) <= INT32_MAX):
        if bias is not None:
            acc += bias.astype(np.int32)
        return acc.astype(np.int32, copy=False)
    return _np_wrap(acc.astype(np.int64) + (bias.astype(np.int64) if bias is not None else 0))


def _np_int_matmul(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, int | None]:
    """a @ b of integer arrays, exact, and its bound (see `_np_int_product`). A reduction too
    long for float32 whose sums fit int32 (int8 x int8 over 1,024 terms or more) goes in
    slices of K that float32 holds, summed in int32: half the memory and twice the speed of
    float64 (an attention's softmax @ V at seq 2048)."""
    k, per_term = a.shape[-1], _magnitude_bound(a) * _magnitude_bound(b)
    step = (FLOAT32_EXACT - 1) // per_term if per_term else k
    if a.ndim >= 2 and b.ndim >= 2 and k * per_term < FLOAT32_EXACT:
        return _np_rows_matmul(a, b), k * per_term
    if b.ndim < 2 or not 0 < step < k or k * per_term > INT32_MAX:
        return _np_int_product(np.matmul, a, b, k)
    acc = None
    for start in range(0, k, step):
        part = np.matmul(a[..., start:start + step].astype(np.float32),
                         b[..., start:start + step, :].astype(np.float32)).astype(np.int32)
        acc = part if acc is None else np.add(acc, part, out=acc)
    return acc, k * per_term


ROWS_ELEMENTS = 2**24  # a float32 block of a product: 64 MB


def _np_row_blocks(a: np.ndarray, b: np.ndarray):
    """(rows, int32 block of a @ b) a block of rows at a time, for integer arrays whose every
    sum float32 holds exactly: exact in any order, so the same bits as one matmul."""
    rows = max(1, ROWS_ELEMENTS // max(1, int(np.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))) * b.shape[-1]))
    b = b.astype(np.float32)
    for start in range(0, a.shape[-2], rows):
        block = slice(start, start + rows)
        yield block, np.matmul(a[..., block, :].astype(np.float32), b).astype(np.int32)


def _np_rows_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b (see `_np_row_blocks`) into int32 a block of rows at a time: no float32 copy of
    the whole product (an attention's scores at seq 2048 are 537 MB)."""
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    out = np.empty(shape, dtype=np.int32)
    for rows, block in _np_row_blocks(a, b):
        out[..., rows, :] = block
    return out


def _np_int_tensordot(a: np.ndarray, b: np.ndarray, axes: tuple[list[int], list[int]]) -> tuple[np.ndarray, int | None]:
    k = int(np.prod([a.shape[i] for i in axes[0]]))
    return _np_int_product(lambda x, y: np.tensordot(x, y, axes=axes), a, b, k)


def _np_conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, attrs: dict[str, Any]) -> np.ndarray:
    channels_last = attrs["layout"] in CHANNELS_LAST
    if channels_last:
        x = np.moveaxis(x, -1, 1)
    if attrs["weight_layout"] in CHANNELS_LAST_WEIGHTS:  # [*kernel, in, out] -> [out, in, *kernel]
        k = w.ndim - 2
        w = w.transpose(k + 1, k, *range(k))
    nd = w.ndim - 2
    stride, padding, dilation = attrs["stride"], attrs["padding"], attrs["dilation"]
    x = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding])
    kernel = w.shape[2:]
    out = [(x.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(nd)]
    columns = []
    for offsets in np.ndindex(*kernel):
        window = tuple(slice(o * dilation[i], o * dilation[i] + stride[i] * (out[i] - 1) + 1, stride[i])
                       for i, o in enumerate(offsets))
        columns.append(x[(slice(None), slice(None)) + window])
    patches = np.stack(columns, axis=2)  # [N, C, taps, *out]
    groups = int(attrs.get("groups", 1))
    per_in, per_out = patches.shape[1] // groups, w.shape[0] // groups  # channels of one group
    w = w.reshape(w.shape[0], w.shape[1], -1)
    parts = [_np_int_tensordot(patches[:, g * per_in:(g + 1) * per_in], w[g * per_out:(g + 1) * per_out],
                               axes=([1, 2], [1, 2])) for g in range(groups)]
    bound = None if any(b is None for _, b in parts) else max(b for _, b in parts)
    y = np.concatenate([np.moveaxis(part.astype(np.int64) if bound is None else part, -1, 1) for part, _ in parts],
                       axis=1)  # [N, O, *out]
    y = _np_accumulate(y, bound, None if bias is None else bias.reshape([1, -1] + [1] * nd))
    return np.moveaxis(y, 1, -1) if channels_last else y


def _np_max_pool2d(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray | None:
    if attrs["ceil_mode"]:
        return None
    channels_last = attrs.get("layout") == "NHWC"
    if channels_last:
        x = np.moveaxis(x, -1, 1)
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = attrs["kernel"], attrs["stride"], attrs["padding"], attrs["dilation"]
    x = np.pad(x, [(0, 0), (0, 0), (ph, ph), (pw, pw)], constant_values=np.iinfo(x.dtype).min)
    oh = (x.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (x.shape[3] - dw * (kw - 1) - 1) // sw + 1
    y = None
    for i in range(kh):
        for j in range(kw):
            window = x[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            y = window if y is None else np.maximum(y, window)
    return np.moveaxis(y, 1, -1) if channels_last else y


def _integer_op(op: Op, args: list[np.ndarray]) -> np.ndarray | None:
    """numpy for the integer path; None hands the op to the torch interpreter (float ops)."""
    if op.kind in ("quantize", "requantize", "dequantize"):
        return _np_quantize_op(op.kind, args[0], _np_scale(op.attrs, args[0].shape))
    if not args or args[0].dtype not in (np.int8, np.int32):
        return None
    bias = args[2] if len(args) > 2 else None
    if op.kind == "linear":
        return _np_accumulate(*_np_int_matmul(args[0], args[1].T), bias)
    if op.kind == "matmul":
        return _np_accumulate(*_np_int_matmul(args[0], args[1]), bias)
    if op.kind in CONV_KINDS:
        return _np_conv(args[0], args[1], bias, op.attrs)
    if op.kind == "relu":
        return np.maximum(args[0], 0).astype(args[0].dtype)
    if op.kind == "max_pool2d":
        return _np_max_pool2d(args[0], op.attrs)
    return None


class _IntegerPath:
    """The numpy integer implementation, one op at a time (`integer_values`, `verify`): its own
    values, each let go once its last reader has run unless `keep_all`."""

    def __init__(self, graph: Graph, inputs: tuple, keep_all: bool):
        self.graph, self.keep_all = graph, keep_all
        self.values: dict[str, np.ndarray] = {name: torch.as_tensor(v).numpy() for name, v in zip(graph.inputs, inputs)}
        self.values.update(graph.weights)
        self.last_use = {name: i for i, op in enumerate(graph.ops) for name in op.inputs}

    def step(self, i: int, op: Op, traced: dict | None) -> np.ndarray:
        """Op `i`'s value; `traced`: the torch trace's values of its inputs and output (see
        `integer_values`)."""
        args = [self.values[n] for n in op.inputs]
        result = _integer_op(op, args)
        if result is None and traced is not None and _same_bits(args, [traced[n] for n in op.inputs]):
            result = traced[op.outputs[0]].numpy()
        if result is None:
            with torch.no_grad():
                result = INTERPRETERS[op.kind](op, [torch.from_numpy(np.asarray(a, order="C")) for a in args]).numpy()
        del args
        self.record(i, op, result)
        return result

    def record(self, i: int, op: Op, result: np.ndarray) -> None:
        """Op `i`'s value is `result`; its inputs read for the last time go."""
        self.values[op.outputs[0]] = result
        if not self.keep_all:
            for name in set(op.inputs):
                if self.last_use[name] == i and name not in self.graph.weights:
                    del self.values[name]

    def passed(self, op: Op) -> None:
        """Op's value read by the caller: let go when no op reads it."""
        if not self.keep_all and op.outputs[0] not in self.last_use:
            del self.values[op.outputs[0]]


def _agrees_in_blocks(op: Op, args: list[np.ndarray], want: np.ndarray) -> bool | None:
    """Whether the integer path's value of `op` has the bits of `want` (the trace's), computed
    and compared a block at a time (a 2-D slice, or a block of a product's rows) with the very
    arithmetic of `_integer_op`, never whole: an attention's scores at seq 2048 are 537 MB
    each side. None: not an op computed so (the caller computes it whole)."""
    if op.kind in ("quantize", "requantize", "dequantize"):
        x = args[0]
        if x.shape != want.shape or x.ndim < 2:
            return None
        scale = np.broadcast_to(_np_scale(op.attrs, x.shape), x.shape)
        for index in np.ndindex(*x.shape[:-2]):
            block = _np_quantize_op(op.kind, x[index], scale[index])
            if block.dtype != want.dtype or not np.array_equal(_bits(block), _bits(want[index])):
                return False
        return True
    if (op.kind == "matmul" and len(args) == 2 and all(a.dtype == np.int8 and a.ndim >= 2 for a in args)
            and args[0].shape[-1] * INT8_PRODUCT_MAX < FLOAT32_EXACT and want.dtype == np.int32):
        a, b = args
        shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
        if want.shape != shape:
            return None
        return all(np.array_equal(block, want[..., rows, :]) for rows, block in _np_row_blocks(a, b))
    return None


def integer_values(graph: Graph, *inputs: Any, keep_all: bool = True, traced: dict | None = None):
    """(name, value) of every op output in graph order, computed with numpy integer
    arithmetic on the integer path. ``keep_all=False`` lets each value go once its last
    reader has run (a real layer's tensors are hundreds of MB each). `traced`: the graph's
    torch trace on the same inputs; an op left to the torch interpreter (a float op) whose
    arguments have the very bits of the trace's takes the trace's value, which the same
    interpreter gave for the same arguments (a real layer's softmax is seconds)."""
    path = _IntegerPath(graph, inputs, keep_all)
    for i, op in enumerate(graph.ops):
        result = path.step(i, op, traced)
        yield op.outputs[0], result
        del result
        path.passed(op)


def _same_bits(arrays: list[np.ndarray], tensors: list) -> bool:
    """Whether each array has the shape, dtype and bits of the (torch) tensor beside it."""
    for a, t in zip(arrays, tensors):
        b = t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if _same_memory(a, b):  # the trace's own value taken before (a float op's): its bits
            continue
        if not np.array_equal(_bits(a), _bits(b)):
            return False
    return True


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays are views of the very same elements (same start, shape, strides, dtype)."""
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape
            and a.strides == b.strides and a.dtype == b.dtype)


def integer_reference(graph: Graph, *inputs: Any) -> dict[str, np.ndarray]:
    """Every tensor's value, computed with numpy integer arithmetic on the integer path."""
    values: dict[str, np.ndarray] = {name: torch.as_tensor(v).numpy() for name, v in zip(graph.inputs, inputs)}
    values.update(graph.weights)
    values.update(integer_values(graph, *inputs))
    return values


def _bits(array: np.ndarray) -> np.ndarray:
    """A float array's bits as unsigned integers (NaNs and signed zeros compare by their bits);
    a view of any layout (the same item size), not a copy."""
    array = np.asarray(array)
    return array.view(f"u{array.dtype.itemsize}") if array.dtype.kind == "f" else array


# A float output computed by the same float ops from the same integer values may still
# differ in its last bits (torch's kernels reduce a strided view in another order than a
# contiguous copy): float outputs agree within this, relative to their largest value.
FLOAT_TAIL_TOLERANCE = 1e-5


def verify(graph: Graph, ctx) -> dict[str, Any]:
    """The quantized graph's PyTorch reference against the numpy integer implementation:
    equal bits on every integer tensor and every integer output; a float output (a float
    tail after the integer path) within `FLOAT_TAIL_TOLERANCE`. Compared op by op during the
    stage's trace (`Context.trace`'s `watch`): neither side's values are all kept."""
    integer_names = {op.outputs[0] for op in graph.ops if graph.tensors[op.outputs[0]].dtype in ("int8", "int32")}
    floats = [n for n in graph.outputs if n not in integer_names and graph.tensors[n].dtype.startswith("float")]
    compared = integer_names | {n for n in graph.outputs if n not in floats}

    def float_error(want: torch.Tensor, got: np.ndarray) -> float:
        want, got = want.double(), torch.from_numpy(np.asarray(got)).double()
        if want.shape != got.shape:
            return float("inf")
        scale = want.abs().max().item() if want.numel() else 0.0
        return (want - got).abs().max().item() / scale if scale > 0 else float((want != got).any())

    mismatches, float_errors = [], {}

    def compare(name: str, want: torch.Tensor, value: np.ndarray) -> bool:
        """Records the verdict on `name`; whether the two have the same bits, shape and dtype."""
        same = want.shape == value.shape and (_same_memory(want.numpy(), value)
                                              or np.array_equal(_bits(want.numpy()), _bits(value)))
        if name in compared and not same:
            mismatches.append(name)
        if name in floats:
            float_errors[name] = float_error(want, value)
        return same and want.numpy().dtype == value.dtype

    path, index = _IntegerPath(graph, ctx.inputs, keep_all=False), itertools.count()

    def watch(op: Op, traced: dict) -> None:  # traced: the torch trace's live values, the op's inputs among them
        out, i = op.outputs[0], next(index)
        if out not in floats:
            want = traced[out].numpy()
            if _agrees_in_blocks(op, [path.values[n] for n in op.inputs], want):
                path.record(i, op, want)  # the same bits, compared block by block: one copy held
                path.passed(op)
                return
        result = path.step(i, op, traced)
        if compare(out, traced[out], result) and out in path.values:
            path.values[out] = traced[out].numpy()  # the same bits: one copy held, not two
        del result
        path.passed(op)

    reference = ctx.trace(graph, watch=watch)
    # an output that is an input or a weight: no op computes it
    graph_values = {name: torch.as_tensor(v).numpy() for name, v in zip(graph.inputs, ctx.inputs)}
    graph_values.update(graph.weights)
    for name in graph.outputs:
        if name in graph_values:
            compare(name, reference[name], graph_values[name])
    order = {op.outputs[0]: i for i, op in enumerate(graph.ops)}
    mismatches = sorted(set(mismatches), key=lambda n: order.get(n, len(order)))
    off = [n for n in floats if not float_errors.get(n, float("inf")) <= FLOAT_TAIL_TOLERANCE]
    return {"passed": not mismatches and not off, "bit_exact": not mismatches, "integer_tensors_compared": len(compared),
            "first_mismatch": (mismatches + off)[0] if mismatches or off else None,
            "float_outputs_compared": len(floats), "float_outputs_max_rel_error": max(float_errors.values(), default=0.0),
            "float_tolerance": FLOAT_TAIL_TOLERANCE}
