"""Source-derived counts of one op: what the model asks for, before any mapping.

Rules (one place, so the analytical model and reports agree on what a count means):
- macs: linear and matmul, M * N * K * batch; conv1d / conv2d, M * N * K of the implicit
  GEMM (batch * output positions, out channels, in channels * kernel); sdpa, both of its
  products, batch * S * T * (D + Dv).
- other_ops (elementary arithmetic that is not a MAC):
  - one per output element for elementwise ops (add, sub, mul, div), activations
    (relu, gelu, silu) and unary ops (neg, abs, exp, rsqrt, sqrt, tanh, sigmoid, cos, sin, pow);
  - the bias add of a linear / matmul / conv: one per output element;
  - softmax: 5 per element (max, subtract, exp, sum, divide);
  - layer_norm: 5 per element (mean, subtract, square, mean, normalize) plus one per
    element for each of the weight and the bias;
  - batch_norm (inference): 2 per element (its constants fold to one multiply-add);
  - mean / sum: one add per input element, and for mean one divide per output element;
  - max_pool2d: kernel elements per output element; avg_pool2d: that plus one divide;
  - sdpa: 6 per score (scale, then softmax's 5), plus one per score for a mask;
  - quantize / requantize: 2 per element (scale multiply, round-and-saturate);
    dequantize: 1 per element;
  - layout and data movement (reshape, expand, slice, select, permute, cat, stack,
    embedding): none.
- bytes_read / bytes_written: each distinct input tensor read once, the output
  written once, at its dtype's itemsize. Views (reshape, expand, slice, select) are
  descriptors only (0 bytes); permute, cat and stack move their whole output (read +
  write). An embedding reads the rows it gathers (its output's bytes) and the indices.
- weight_bytes: bytes of the inputs that are constants (parameters, buffers, lifted
  constants, or a layout op applied to one of those).
"""

from __future__ import annotations

import math

from dse.workload.graph import (
    ACTIVATION_KINDS,
    BINARY_KINDS,
    CONV_KINDS,
    MATMUL_KINDS,
    UNARY_KINDS,
    VIEW_KINDS,
    OpCounts,
    TensorSpec,
)
from dse.workload.graph import MOVE_KINDS

_PER_ELEMENT = {"softmax": 5, "batch_norm": 2, "quantize": 2, "requantize": 2, "dequantize": 1, "where": 1}


def _other_ops(kind: str, attrs: dict, inputs: list[TensorSpec], output: TensorSpec) -> int:
    n = output.numel
    if kind in BINARY_KINDS or kind in ACTIVATION_KINDS or kind in UNARY_KINDS:
        return n
    if kind in _PER_ELEMENT:
        return _PER_ELEMENT[kind] * n
    if kind == "layer_norm":
        return (5 + bool(attrs.get("has_weight", True)) + bool(attrs.get("has_bias", True))) * n
    if kind in ("mean", "sum"):
        return inputs[0].numel + (n if kind == "mean" else 0)
    if kind == "vector_norm":  # |x|^p and a sum per input element, a root per output
        return 2 * inputs[0].numel + n
    if kind == "adaptive_avg_pool2d":  # each input element summed once or twice (overlapping windows), a divide per output
        h, w = inputs[0].shape[-2:]
        oh, ow = attrs["output_size"]
        return (-(-h // oh) + 1) * (-(-w // ow) + 1) * n + n
    if kind in ("max_pool2d", "avg_pool2d"):
        return (math.prod(attrs["kernel"]) + (kind == "avg_pool2d")) * n
    if kind == "sdpa":
        scores = attrs["batch"] * attrs["S"] * attrs["T"]
        return (6 + bool(attrs.get("has_mask"))) * scores
    return 0


def count_op(
    kind: str,
    attrs: dict,
    inputs: list[TensorSpec],
    output: TensorSpec,
    constants: set[str],
) -> OpCounts:
    distinct = list({spec.name: spec for spec in inputs}.values())
    weight_bytes = sum(spec.nbytes for spec in distinct if spec.name in constants)
    if kind in VIEW_KINDS:
        return OpCounts(weight_bytes=weight_bytes)
    bytes_read = sum(spec.nbytes for spec in distinct)
    if kind == "embedding":
        bytes_read = output.nbytes + inputs[1].nbytes
    macs = 0
    other_ops = _other_ops(kind, attrs, inputs, output)
    if kind in MATMUL_KINDS or kind in CONV_KINDS:
        macs = attrs["M"] * attrs["N"] * attrs["K"] * attrs.get("batch", 1)
        if attrs.get("has_bias"):
            other_ops = attrs["M"] * attrs["N"] * attrs.get("batch", 1)
    elif kind == "sdpa":
        macs = attrs["batch"] * attrs["S"] * attrs["T"] * (attrs["D"] + attrs["Dv"])
    return OpCounts(
        macs=macs,
        other_ops=other_ops,
        bytes_read=bytes_read,
        bytes_written=output.nbytes,
        weight_bytes=weight_bytes,
    )


def constant_tensors(graph) -> set[str]:
    """Weights, and what layout and data-movement ops make of weights alone."""
    constants = set(graph.weights)
    for op in graph.ops:
        if op.kind in MOVE_KINDS and op.inputs and all(name in constants for name in op.inputs):
            constants.update(op.outputs)
    return constants


def recount(graph) -> None:
    """Recompute every op's counts in place (after a step changed shapes, dtypes or ops)."""
    constants = constant_tensors(graph)
    for op in graph.ops:
        op.counts = count_op(op.kind, op.attrs, [graph.tensors[n] for n in op.inputs],
                             graph.tensors[op.outputs[0]], constants)
