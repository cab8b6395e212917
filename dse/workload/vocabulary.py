"""The op vocabulary of a captured workload: the op kinds, the layouts, and the plain
records a graph is made of (TensorSpec, OpCounts, Op). Both the graph (`graph`) and its
reference interpreter (`interpret`) read it; it reads neither, and imports no torch.
The kinds and their attrs are described in `dse.workload.graph`."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

MATMUL_KINDS = ("linear", "matmul")
CONV_KINDS = ("conv1d", "conv2d", "conv3d")
BINARY_KINDS = ("add", "sub", "mul", "div", "maximum", "minimum")
ACTIVATION_KINDS = ("relu", "gelu", "silu", "clamp", "leaky_relu", "hardswish", "hardsigmoid", "mish")
UNARY_KINDS = ("neg", "abs", "exp", "rsqrt", "sqrt", "tanh", "sigmoid", "cos", "sin", "pow", "softplus")
# Elementwise kinds that are the aten op of their own name on one tensor, with no attributes:
# the capture reads ``aten.<kind>.default`` as one, the interpreter runs that aten op. A new
# such op on the core is its name here (and in UNARY_KINDS or ACTIVATION_KINDS): one file.
ATEN_ELEMENTWISE = ("relu", "silu", "hardswish", "hardsigmoid", "mish", "neg", "abs", "exp", "rsqrt", "sqrt", "tanh",
                    "sigmoid", "cos", "sin")
NORM_KINDS = ("softmax", "layer_norm", "batch_norm", "group_norm")
REDUCE_KINDS = ("mean", "sum", "amax", "amin")
POOL_KINDS = ("max_pool2d", "avg_pool2d")
# adaptive average pooling whose windows do not tile the input evenly (even ones are avg_pool2d)
ADAPTIVE_KINDS = ("adaptive_avg_pool2d",)
VECTOR_NORM_KINDS = ("vector_norm",)
LAYOUT_KINDS = ("reshape", "permute")
VIEW_KINDS = ("reshape", "expand", "slice", "select")  # no data moves: descriptors only
DATA_KINDS = ("cat", "stack", "embedding", "pad", "index", "gather", "roll", "upsample", "cast", "repeat",
              "slice_scatter")
ARG_KINDS = ("argmax", "argmin")  # the int64 position of a reduction's max / min
ATTENTION_KINDS = ("sdpa",)
CHOICE_KINDS = ("where",)  # elementwise choice by a bool mask
QUANT_KINDS = ("quantize", "requantize", "dequantize")
# a mixture of experts' routing, on the core (dse/workload/moe.py)
ROUTING_KINDS = ("topk", "sort", "cumsum", "one_hot", "scatter", "scatter_add", "bitwise_not", "moe_tokens",
                 "moe_weights", "index_add")


@dataclass(frozen=True)
class Attribute:
    """An attribute of an `AtenCall` op: its name in the graph op's attrs (and, when it is a
    keyword of the call, the keyword's name), `at` its position among the call's arguments
    (None: a keyword), and the rule it is read by: "axis" (an int, modulo the first input's
    rank), "dtype" (a dtype's name, or None), "out_last" (the output's last extent, whatever
    the call says)."""

    name: str
    at: int | None
    rule: str


@dataclass(frozen=True)
class AtenCall:
    """A core op that is one aten call (``aten.<kind>.<overload>``) on its first `inputs`
    arguments with attributes of its own: the capture reads the attributes from the call and
    the interpreter makes the same call with them, so a new such op is declared here alone."""

    overload: str
    inputs: int
    attrs: tuple[Attribute, ...]


ATEN_CALLS = {
    "cumsum": AtenCall("default", 1, (Attribute("dim", 1, "axis"), Attribute("dtype", None, "dtype"))),
    "one_hot": AtenCall("default", 1, (Attribute("classes", 1, "out_last"),)),
}
# a recurrence over time steps as one op, and its step's elementwise cell (dse/workload/scan.py)
SCAN_KINDS = ("scan", "rnn_cell")
# Ops that only rearrange or pick values: applied to constants they give a constant,
# which a frontend step may fold offline.
MOVE_KINDS = ("reshape", "permute", "expand", "slice", "select", "cat", "stack")
KINDS = (MATMUL_KINDS + CONV_KINDS + BINARY_KINDS + ACTIVATION_KINDS + UNARY_KINDS + NORM_KINDS
         + REDUCE_KINDS + VECTOR_NORM_KINDS + ARG_KINDS + POOL_KINDS + ADAPTIVE_KINDS + ("permute",) + VIEW_KINDS + DATA_KINDS + ATTENTION_KINDS
         + CHOICE_KINDS + QUANT_KINDS + ROUTING_KINDS + SCAN_KINDS)
CHANNELS_LAST = ("NLC", "NHWC", "NDHWC")
# conv weights pre-transposed to [*kernel, in, out] (the channels-last convs' GEMM B)
CHANNELS_LAST_WEIGHTS = ("WIO", "HWIO", "DHWIO")
CHANNELS_FIRST = {1: "NCL", 2: "NCHW", 3: "NCDHW"}  # by spatial dims
CHANNELS_FIRST_WEIGHTS = {1: "OIW", 2: "OIHW", 3: "OIDHW"}
INT8_MIN, INT8_MAX = -128, 127


# Sizes of the dtypes numpy does not name; the rest come from numpy (no torch import).
_ITEMSIZE = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def itemsize(dtype: str) -> int:
    if dtype in _ITEMSIZE:
        return _ITEMSIZE[dtype]
    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # a torch-only dtype: ask torch
        import torch

        return getattr(torch, dtype).itemsize


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * itemsize(self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class OpCounts:
    """Counts derived from the source graph alone, before any mapping to a chip."""

    macs: int = 0
    other_ops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    weight_bytes: int = 0

    def __add__(self, other: OpCounts) -> OpCounts:
        return OpCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass
class Op:
    name: str
    kind: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    source: str
    counts: OpCounts

def scale_array(attrs: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    """The fp32 scale of a quantize / requantize / dequantize op, broadcastable to `shape`.

    `scale` is a float (per tensor) or a nested list with one level per entry of
    `scale_axes` (ascending tensor axes); along axis a with group g, element i uses
    entry i // g (g = 1: per channel, g = 16: per 16-row or 16-column strip)."""
    values = np.array(attrs["scale"], dtype=np.float32)  # a copy: callers may write to it
    axes, groups = list(attrs.get("scale_axes", [])), list(attrs.get("scale_groups", []))
    if values.ndim != len(axes) or len(groups) != len(axes) or axes != sorted(axes):
        raise ValueError(f"scale of rank {values.ndim} with scale_axes {axes}, scale_groups {groups}")
    if not axes:
        return values
    index = np.ix_(*(np.arange(shape[a]) // g for a, g in zip(axes, groups)))
    view = [1] * len(shape)
    for a in axes:
        view[a] = shape[a]
    return values[index].reshape(view)
