"""Capture an nn.Module as a dse Graph, via torch.export (one whole graph).

The exported graph is read as is first: it keeps `aten.linear`, `aten.matmul`,
convolutions, norms, softmax, pooling, `scaled_dot_product_attention`, `gelu` and `silu`
whole, which is what the chip's Balls (and the core's routines) see. Only when it holds
an op we cannot map (an in-place op, a lifted constant, a composite op) is it decomposed,
with a table that still keeps those ops whole. An op the graph cannot hold, or a form of
one it cannot (a grouped conv, a training-mode batch norm), raises `UnsupportedOpError`
naming the aten op, the reason, the model line and the recipe file; nothing is dropped.
Each handler below maps one aten op family to a dse kind (see dse/workload/graph.py).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import operator
import re
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind, TensorArgument
from torch.fx import Node

from dse.errors import InputError
from dse.workload import moe_capture as moe
from dse.workload.counts import count_op
from dse.workload.graph import (ATEN_ELEMENTWISE, CHANNELS_FIRST, CHANNELS_FIRST_WEIGHTS, CONV_KINDS, MOVE_KINDS, Graph,
                                Op, TensorSpec, dtype_name, weight_array)
from dse.workload.reroll import reroll
from dse.workload.scan_capture import RNN_TARGETS, ScanEmitter, handler_attrs, unused_state
from dse.workload.vocabulary import ATEN_CALLS, AtenCall

aten = torch.ops.aten
_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)[^\n]*\n?(?P<code>[^\n]*)')


@dataclass(frozen=True)
class Unsupported:
    """One op the graph cannot hold: how often the model uses it, and where first."""

    op: str
    count: int
    source: str  # file:line of the first use
    code: str = ""

    def describe(self) -> str:
        where = f"{self.source} ({self.code.strip()!r})" if self.code.strip() else self.source
        times = f" x{self.count}" if self.count > 1 else ""
        return f"{self.op}{times} at {where}" if times == "" else f"{self.op}{times}, first at {where}"


class UnsupportedOpError(InputError):
    """The captured model uses ops the dse graph cannot hold (yet): every one of them,
    with its count and first source line, in one message (`ops`)."""

    def __init__(self, op: str, source: str, file: Any, allowed: str, code: str = "",
                 ops: "list[Unsupported] | None" = None):
        ops = ops or [Unsupported(op, 1, source, code)]
        super().__init__(file=file, field="workload.op", value=op, allowed=allowed)
        self.op = op
        self.source = source
        self.ops = ops
        what = "unsupported op " if len(ops) == 1 else f"{len(ops)} unsupported ops: "
        # The supported list is long: the line names how many, `--json` carries them all.
        supported = len(allowed.split(", "))
        self.args = (f"{self.file}: field 'workload.op': {what}{'; '.join(u.describe() for u in ops)}; "
                     f"allowed: the {supported} aten ops dse supports (all listed under --json)",)


@dataclass
class _Lowered:
    """What a handler makes of one aten node: a dse op kind over some input nodes."""

    kind: str
    inputs: list[Node]
    attrs: dict[str, Any]


@dataclass
class _Identity:
    """The node forwards its input unchanged (clone, detach, eval-mode dropout)."""

    source: Node


@dataclass
class _Unsupported:
    """This form of a supported op is not (a transposed conv, a training-mode norm)."""

    reason: str


_Handler = Callable[[Node], "_Lowered | _Identity | _Unsupported | None"]  # None: unsupported form


def _val(node: Node) -> Any:
    """The example value of a node; a multi-output op (native norms, pools with
    indices) is described by its first output, the only one the graph keeps."""
    val = node.meta.get("val")
    return val[0] if isinstance(val, (tuple, list)) and val else val


def _shape(node: Node) -> tuple[int, ...]:
    return tuple(int(d) for d in _val(node).shape)


def _arg(node: Node, index: int, name: str, default: Any = None) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


# --- handlers, one per aten op family ---

def _linear(node: Node) -> _Lowered | None:
    x, weight, bias = node.args[0], node.args[1], _arg(node, 2, "bias")
    x_shape, w_shape = _shape(x), _shape(weight)
    if len(w_shape) != 2 or not x_shape:
        return None
    attrs = {"M": math.prod(x_shape[:-1]), "N": w_shape[0], "K": x_shape[-1], "batch": 1, "has_bias": bias is not None}
    return _Lowered("linear", [x, weight] + ([bias] if bias is not None else []), attrs)


def _matmul_attrs(a: tuple[int, ...], b: tuple[int, ...], out: tuple[int, ...]) -> dict[str, int]:
    # A 1-D operand is a vector: M (or N) is 1 and has no dim in the output.
    matrix_dims = (len(a) >= 2) + (len(b) >= 2)
    return {
        "M": a[-2] if len(a) >= 2 else 1,
        "N": b[-1] if len(b) >= 2 else 1,
        "K": a[-1],
        "batch": math.prod(out[: len(out) - matrix_dims]),
    }


def _matmul(node: Node) -> _Lowered:
    a, b = node.args[:2]
    attrs = {**_matmul_attrs(_shape(a), _shape(b), _shape(node)), "has_bias": False}
    return _Lowered("matmul", [a, b], attrs)


def _addmm(node: Node) -> _Lowered:
    # Reordered to [a, b, bias] so inputs[0] @ inputs[1] holds for every matmul op.
    bias, a, b = node.args[:3]
    attrs = {**_matmul_attrs(_shape(a), _shape(b), _shape(node)), "has_bias": True}
    beta, alpha = node.kwargs.get("beta", 1), node.kwargs.get("alpha", 1)  # keyword-only in aten
    if beta != 1:
        attrs["beta"] = beta
    if alpha != 1:
        attrs["alpha"] = alpha
    return _Lowered("matmul", [a, b, bias], attrs)


def _binary(kind: str, reverse: bool = False) -> _Handler:
    """a <kind> (alpha * b); `reverse` for rsub, whose aten args are (b, a)."""

    def handle(node: Node) -> _Lowered | None:
        operands = list(node.args[:2])
        if reverse:
            operands.reverse()
        tensors = [x for x in operands if isinstance(x, Node)]
        scalars = [(i, x) for i, x in enumerate(operands) if not isinstance(x, Node)]
        if not tensors or any(not isinstance(x, (int, float, bool)) for _, x in scalars):
            return None
        attrs: dict[str, Any] = {}
        if scalars:
            attrs["scalar_index"], attrs["scalar"] = scalars[0]
        alpha = _arg(node, 2, "alpha", 1)
        if alpha != 1:
            attrs["alpha"] = alpha
        if node.kwargs.get("rounding_mode") is not None:
            attrs["rounding_mode"] = node.kwargs["rounding_mode"]
        return _Lowered(kind, tensors, attrs)

    return handle


def _gelu(node: Node) -> _Lowered:
    return _Lowered("gelu", [node.args[0]], {"approximate": node.kwargs.get("approximate", "none")})


def _clamp(low: float | None = None, high: float | None = None) -> _Handler:
    """clamp / hardtanh / relu6 (and clamp_min / clamp_max): the bounds from the node's
    arguments, or fixed ones."""

    def handle(node: Node) -> _Lowered | None:
        name = str(node.target).removeprefix("aten.")
        if name.startswith("hardtanh"):
            lo, hi = _arg(node, 1, "min_val", -1.0), _arg(node, 2, "max_val", 1.0)
        elif name.startswith("clamp_min"):
            lo, hi = node.args[1], None
        elif name.startswith("clamp_max"):
            lo, hi = None, node.args[1]
        elif name.startswith("clamp"):
            lo, hi = _arg(node, 1, "min"), _arg(node, 2, "max")
        else:
            lo, hi = low, high
        if any(v is not None and not isinstance(v, (int, float)) for v in (lo, hi)):
            return None  # tensor bounds: not a clamp by constants
        return _Lowered("clamp", [node.args[0]], {"min": lo, "max": hi})

    return handle


def _leaky_relu(node: Node) -> _Lowered:
    return _Lowered("leaky_relu", [node.args[0]], {"negative_slope": float(_arg(node, 1, "negative_slope", 0.01))})


def _pad(node: Node) -> _Lowered | _Unsupported:
    """Constant padding: F.pad's list (last dim first, (before, after) each) and value; a
    negative amount crops (RWKV's time shift: one step in front, the last one off)."""
    pad = [int(v) for v in node.args[1]]
    name = str(node.target).removeprefix("aten.")
    if name.startswith("pad.") and _arg(node, 2, "mode", "constant") != "constant":
        return _Unsupported(f"pad mode {_arg(node, 2, 'mode')!r}; only 'constant'")
    value = _arg(node, 3 if name.startswith("pad.") else 2, "value", 0.0)
    if value is None:
        value = 0.0
    return _Lowered("pad", [node.args[0]], {"pad": pad, "value": float(value)})


def _index(node: Node) -> _Lowered | None:
    """x[i0, i1, ...] with index tensors (aten.index.Tensor); a None index keeps its axis."""
    x, indices = node.args[0], list(node.args[1])
    if not all(i is None or isinstance(i, Node) for i in indices):
        return None
    present = [k for k, i in enumerate(indices) if i is not None]
    return _Lowered("index", [x] + [indices[k] for k in present], {"positions": present, "rank": len(indices)})


def _index_select(node: Node) -> _Lowered:
    """index_select(x, dim, i) is x[:, ..., i] with i at `dim`: the index op."""
    x, dim = node.args[0], int(node.args[1]) % len(_shape(node.args[0]))
    return _Lowered("index", [x, node.args[2]], {"positions": [dim], "rank": dim + 1})


def _gather(node: Node) -> _Lowered | _Unsupported:
    if _arg(node, 3, "sparse_grad", False):
        return _Unsupported("gather with sparse_grad")
    x = node.args[0]
    return _Lowered("gather", [x, node.args[2]], {"dim": int(node.args[1]) % len(_shape(x))})


def _extreme(kind: str) -> _Handler:
    """max / min of a whole tensor (aten.max.default): amax / amin over every axis."""
    def handle(node: Node) -> _Lowered:
        return _Lowered(kind, [node.args[0]], {"dims": list(range(len(_shape(node.args[0])))), "keepdim": False})

    return handle


def _arg_extreme(kind: str) -> _Handler:
    """argmax / argmin(x, dim, keepdim); with no dim, over the flattened tensor (a reshape first)."""
    def handle(node: Node) -> _Lowered | _Unsupported:
        dim = _arg(node, 1, "dim")
        if dim is None:
            return _Unsupported(f"{kind} over the flattened tensor (give a dim)")
        return _Lowered(kind, [node.args[0]], {"dim": int(dim) % len(_shape(node.args[0])),
                                               "keepdim": bool(_arg(node, 2, "keepdim", False))})

    return handle


def _group_norm(node: Node) -> _Lowered | None:
    x, groups = node.args[0], int(node.args[1])
    weight, bias = _arg(node, 2, "weight"), _arg(node, 3, "bias")
    inputs = [x] + [t for t in (weight, bias) if isinstance(t, Node)]
    return _Lowered("group_norm", inputs, {"num_groups": groups, "eps": float(_arg(node, 4, "eps", 1e-5)),
                                           "has_weight": isinstance(weight, Node), "has_bias": isinstance(bias, Node)})


def _roll(node: Node) -> _Lowered:
    return _Lowered("roll", [node.args[0]], {"shifts": _ints(node.args[1], 1), "dims": _ints(_arg(node, 2, "dims", []), 1)})


def _upsample(node: Node) -> _Lowered:
    """Nearest / bilinear upsampling, kept as the aten op it is (its arguments as given: the
    source index of an output pixel depends on whether a size or a scale was given)."""
    name = str(node.target).removeprefix("aten.")
    args = [list(a) if isinstance(a, (list, tuple)) else a for a in node.args[1:]]
    return _Lowered("upsample", [node.args[0]], {"aten": name, "args": args})


def _where(node: Node) -> _Lowered | None:
    """where(cond, a, b); a scalar a or b is kept in the attrs (as aten's Scalar overloads)."""
    operands = list(node.args[:3])
    if not isinstance(operands[0], Node):
        return None
    scalars = [[i, x] for i, x in enumerate(operands) if not isinstance(x, Node)]
    if any(not isinstance(x, (int, float, bool)) for _, x in scalars):
        return None
    return _Lowered("where", [x for x in operands if isinstance(x, Node)], {"scalars": scalars})


def _masked_fill(node: Node) -> _Lowered | None:
    """masked_fill(x, mask, value) is where(mask, value, x)."""
    x, mask, value = node.args[:3]
    if isinstance(value, Node):
        return _Lowered("where", [mask, value, x], {"scalars": []})
    if not isinstance(value, (int, float, bool)):
        return None
    return _Lowered("where", [mask, x], {"scalars": [[1, value]]})


def _reshape(node: Node) -> _Lowered:
    # Every view-like op keeps its concrete output shape: squeeze dims and -1 resolved.
    return _Lowered("reshape", [node.args[0]], {"shape": list(_shape(node))})


def _permute_of(node: Node, dims: list[int]) -> _Lowered | _Identity:
    rank = len(_shape(node.args[0]))
    dims = [d % rank for d in dims] if rank else []
    if dims == list(range(rank)):
        return _Identity(node.args[0])
    return _Lowered("permute", [node.args[0]], {"dims": dims})


def _swap(rank: int, d0: int, d1: int) -> list[int]:
    dims = list(range(rank))
    if rank:
        dims[d0 % rank], dims[d1 % rank] = dims[d1 % rank], dims[d0 % rank]
    return dims


def _permute(node: Node) -> _Lowered | _Identity:
    return _permute_of(node, list(node.args[1]))


def _transpose(node: Node) -> _Lowered | _Identity:
    return _permute_of(node, _swap(len(_shape(node.args[0])), node.args[1], node.args[2]))


def _t(node: Node) -> _Lowered | _Identity:
    rank = len(_shape(node.args[0]))
    return _permute_of(node, _swap(rank, 0, 1) if rank == 2 else list(range(rank)))


def _matrix_t(node: Node) -> _Lowered | _Identity:
    return _permute_of(node, _swap(len(_shape(node.args[0])), -2, -1))


def _identity(node: Node) -> _Identity:
    return _Identity(node.args[0])


def _dropout(node: Node) -> _Identity | None:
    return _Identity(node.args[0]) if _arg(node, 2, "train") is False else None


def _same_dtype_copy(node: Node) -> _Identity | _Lowered | None:
    """A copy with the same dtype forwards its input; a cast between integer (or bool)
    dtypes, e.g. an index tensor to int32, is a `cast` op (exact where the values fit)."""
    source = node.args[0]
    if _shape(source) != _shape(node):
        return None
    before, after = source.meta["val"].dtype, node.meta["val"].dtype
    if before == after:
        return _Identity(source)
    if not before.is_floating_point and not after.is_floating_point and not before.is_complex:
        return _Lowered("cast", [source], {"dtype": dtype_name(after)})
    if after == torch.bool and not before.is_complex:  # a mask from a float (x != 0), as a router builds
        return _Lowered("cast", [source], {"dtype": "bool"})
    return None


def _ints(value: Any, n: int) -> list[int]:
    value = list(value) if isinstance(value, (list, tuple)) else [value]
    return [int(v) for v in (value * n if len(value) == 1 else value)]


def _conv(node: Node, nd: int, transposed: bool = False, groups: int = 1, stride: Any = 1, padding: Any = 0,
          dilation: Any = 1) -> _Lowered | _Unsupported:
    x, weight, bias = node.args[0], node.args[1], node.args[2] if len(node.args) > 2 else None
    if transposed:
        return _Unsupported("transposed convolution")
    w_shape, out = _shape(weight), _shape(node)
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        else:  # "same": symmetric only when the total padding is even
            totals = [d * (k - 1) for d, k in zip(_ints(dilation, nd), w_shape[2:])]
            if any(t % 2 for t in totals):
                return _Unsupported("padding='same' with an odd total padding")
            padding = [t // 2 for t in totals]
    attrs = {
        # groups > 1 (grouped, depthwise): K is one group's taps x channels, so M x N x K
        # still counts the conv's multiply-accumulates
        "stride": _ints(stride, nd), "padding": _ints(padding, nd), "dilation": _ints(dilation, nd),
        "groups": int(groups),
        "layout": CHANNELS_FIRST[nd], "weight_layout": CHANNELS_FIRST_WEIGHTS[nd],
        "M": out[0] * math.prod(out[2:]), "N": w_shape[0], "K": math.prod(w_shape[1:]), "batch": 1,
        "has_bias": bias is not None,
    }
    if len(_shape(x)) != nd + 2:
        return _Unsupported(f"unbatched conv{nd}d input of rank {len(_shape(x))}")
    return _Lowered(f"conv{nd}d", [x, weight] + ([bias] if bias is not None else []), attrs)


def _conv_nd(nd: int) -> _Handler:
    def handle(node: Node) -> _Lowered | _Unsupported:
        return _conv(node, nd, stride=_arg(node, 3, "stride", 1), padding=_arg(node, 4, "padding", 0),
                     dilation=_arg(node, 5, "dilation", 1), groups=_arg(node, 6, "groups", 1))

    return handle


def _convolution(node: Node) -> _Lowered | _Unsupported:
    nd = len(_shape(node)) - 2
    if nd not in (1, 2, 3):
        return _Unsupported(f"conv{nd}d")
    return _conv(node, nd, transposed=_arg(node, 6, "transposed"), groups=_arg(node, 8, "groups", 1),
                 stride=_arg(node, 3, "stride"), padding=_arg(node, 4, "padding"), dilation=_arg(node, 5, "dilation"))


def _batch_norm(training_index: int | None, eps_index: int) -> _Handler:
    def handle(node: Node) -> _Lowered | _Unsupported:
        x, weight, bias, mean, var = node.args[:5]
        if training_index is not None and _arg(node, training_index, "training"):
            return _Unsupported("batch norm in training mode (call load() in eval mode)")
        if not isinstance(mean, Node) or not isinstance(var, Node):
            return _Unsupported("batch norm without running statistics")
        attrs = {"eps": float(_arg(node, eps_index, "eps")), "axis": 1,
                 "has_weight": isinstance(weight, Node), "has_bias": isinstance(bias, Node)}
        inputs = [x] + [t for t in (weight, bias) if isinstance(t, Node)] + [mean, var]
        return _Lowered("batch_norm", inputs, attrs)

    return handle


def _layer_norm(node: Node) -> _Lowered:
    x, shape = node.args[0], node.args[1]
    weight, bias, eps = _arg(node, 2, "weight"), _arg(node, 3, "bias"), _arg(node, 4, "eps", 1e-5)
    attrs = {"normalized_shape": [int(d) for d in shape], "eps": float(eps),
             "has_weight": isinstance(weight, Node), "has_bias": isinstance(bias, Node)}
    return _Lowered("layer_norm", [x] + [t for t in (weight, bias) if isinstance(t, Node)], attrs)


def _softmax(node: Node) -> _Lowered | _Unsupported:
    x = node.args[0]
    if _val(node).dtype != _val(x).dtype:
        return _Unsupported("softmax with a dtype change")
    return _Lowered("softmax", [x], {"dim": int(node.args[1]) % len(_shape(x))})


def _reduce(kind: str) -> _Handler:
    def handle(node: Node) -> _Lowered | _Unsupported:
        x = node.args[0]
        rank = len(_shape(x))
        dims = _arg(node, 1, "dim")
        dims = list(range(rank)) if dims is None or dims == [] else [int(d) % rank for d in _ints(dims, 1)]
        if _val(node).dtype != _val(x).dtype:
            return _Unsupported(f"{kind} with a dtype change")
        return _Lowered(kind, [x], {"dims": sorted(dims), "keepdim": bool(_arg(node, 2, "keepdim", False))})

    return handle


def _mean_all(node: Node) -> _Lowered:
    return _Lowered("mean", [node.args[0]], {"dims": list(range(len(_shape(node.args[0])))), "keepdim": False})


def _unary(kind: str) -> _Handler:
    def handle(node: Node) -> _Lowered:
        return _Lowered(kind, [node.args[0]], {})

    return handle


def _softplus(node: Node) -> _Lowered | _Unsupported:
    if float(_arg(node, 1, "beta", 1)) != 1 or float(_arg(node, 2, "threshold", 20)) != 20:
        return _Unsupported("softplus with a beta or threshold other than 1 and 20")
    return _Lowered("softplus", [node.args[0]], {})


def _pow(node: Node) -> _Lowered | None:
    exponent = node.args[1]
    if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
        return None
    return _Lowered("pow", [node.args[0]], {"exponent": exponent})


def _embedding(node: Node) -> _Lowered:
    # padding_idx only changes gradients: the forward gathers rows all the same
    return _Lowered("embedding", [node.args[0], node.args[1]], {})


def _max_pool2d(node: Node) -> _Lowered | _Unsupported:
    kernel = _ints(node.args[1], 2)
    stride = _arg(node, 2, "stride", [])
    attrs = {"kernel": kernel, "stride": _ints(stride, 2) if stride else kernel,
             "padding": _ints(_arg(node, 3, "padding", 0), 2), "dilation": _ints(_arg(node, 4, "dilation", 1), 2),
             "ceil_mode": bool(_arg(node, 5, "ceil_mode", False)), "layout": "NCHW"}
    if len(_shape(node.args[0])) != 4:
        return _Unsupported("unbatched max_pool2d")
    return _Lowered("max_pool2d", [node.args[0]], attrs)


def _avg_pool2d(node: Node) -> _Lowered | _Unsupported:
    kernel = _ints(node.args[1], 2)
    stride = _arg(node, 2, "stride", [])
    attrs = {"kernel": kernel, "stride": _ints(stride, 2) if stride else kernel,
             "padding": _ints(_arg(node, 3, "padding", 0), 2), "ceil_mode": bool(_arg(node, 4, "ceil_mode", False)),
             "count_include_pad": bool(_arg(node, 5, "count_include_pad", True)),
             "divisor_override": _arg(node, 6, "divisor_override"), "layout": "NCHW"}
    if len(_shape(node.args[0])) != 4:
        return _Unsupported("unbatched avg_pool2d")
    return _Lowered("avg_pool2d", [node.args[0]], attrs)


def _adaptive_avg_pool2d(node: Node) -> _Lowered | _Unsupported:
    x = node.args[0]
    shape, out = _shape(x), _shape(node)
    if len(shape) != 4:
        return _Unsupported("unbatched adaptive_avg_pool2d")
    if out[2:] == (1, 1):  # global average pooling
        return _Lowered("mean", [x], {"dims": [2, 3], "keepdim": True})
    if shape[2] % out[2] or shape[3] % out[3]:  # windows of several sizes, overlapping (AlexNet's (6, 6))
        return _Lowered("adaptive_avg_pool2d", [x], {"output_size": [int(out[2]), int(out[3])]})
    kernel = [shape[2] // out[2], shape[3] // out[3]]
    return _Lowered("avg_pool2d", [x], {"kernel": kernel, "stride": kernel, "padding": [0, 0], "ceil_mode": False,
                                        "count_include_pad": True, "divisor_override": None, "layout": "NCHW"})


def _vector_norm(node: Node) -> _Lowered | _Unsupported:
    x = node.args[0]
    rank = len(_shape(x))
    dims = _arg(node, 2, "dim")
    dims = list(range(rank)) if dims is None or dims == [] else [int(d) % rank for d in _ints(dims, 1)]
    if _val(node).dtype != _val(x).dtype:
        return _Unsupported("linalg_vector_norm with a dtype change")
    order = _arg(node, 1, "ord", 2)
    return _Lowered("vector_norm", [x], {"ord": float(order), "dims": sorted(dims),
                                         "keepdim": bool(_arg(node, 3, "keepdim", False))})


def _repeat(node: Node) -> _Lowered | _Identity:
    repeats = [int(r) for r in node.args[1]]
    if all(r == 1 for r in repeats) and len(repeats) == len(_shape(node.args[0])):
        return _Identity(node.args[0])
    return _Lowered("repeat", [node.args[0]], {"repeats": repeats})


def _cat(kind: str) -> _Handler:
    def handle(node: Node) -> _Lowered | None:
        tensors = list(node.args[0])
        if not all(isinstance(t, Node) for t in tensors):
            return None
        rank = len(_shape(node))
        # cat skips empty 1-D tensors; keep only the inputs that contribute
        tensors = [t for t in tensors if not (kind == "cat" and _shape(t) == (0,))]
        return _Lowered(kind, tensors, {"dim": int(_arg(node, 1, "dim", 0)) % rank})

    return handle


def _slice(node: Node) -> _Lowered | _Identity:
    x = node.args[0]
    shape = _shape(x)
    dim = int(_arg(node, 1, "dim", 0)) % len(shape)
    start, end, step = _arg(node, 2, "start"), _arg(node, 3, "end"), int(_arg(node, 4, "step", 1))
    start, end, _ = slice(start, end).indices(shape[dim])
    if (start, end, step) == (0, shape[dim], 1):
        return _Identity(x)
    return _Lowered("slice", [x], {"dim": dim, "start": start, "end": end, "step": step})


def _select(node: Node) -> _Lowered | _Unsupported:
    if isinstance(node.args[0], Node) and node.args[0].target == _resolve("view_as_real.default"):
        return _real_of_fftn(node.args[0])  # the real plane of a complex fft result
    x = node.args[0]
    shape = _shape(x)
    dim = int(node.args[1]) % len(shape)
    return _Lowered("select", [x], {"dim": dim, "index": int(node.args[2]) % shape[dim]})


def _expand(node: Node) -> _Lowered | _Identity:
    if _shape(node) == _shape(node.args[0]):
        return _Identity(node.args[0])
    return _Lowered("expand", [node.args[0]], {"shape": list(_shape(node))})


def _slice_scatter(node: Node) -> _Lowered:
    x, src = node.args[:2]
    shape = _shape(x)
    dim = int(_arg(node, 2, "dim", 0)) % len(shape)
    start, end, step = _arg(node, 3, "start"), _arg(node, 4, "end"), int(_arg(node, 5, "step", 1))
    start, end, _ = slice(start, end).indices(shape[dim])
    return _Lowered("slice_scatter", [x, src], {"dim": dim, "start": start, "end": end, "step": step})


def _copy(node: Node) -> _Lowered | _Identity | _Unsupported:
    """aten.copy(self, src) (an in-place ``copy_`` functionalised): src's values in self's
    shape and dtype; self's values are not read."""
    dst, src = node.args[:2]
    if _val(dst).dtype != _val(src).dtype:
        return _Unsupported("copy_ with a dtype change")
    if _shape(src) == _shape(node):
        return _Identity(src)
    return _Lowered("expand", [src], {"shape": list(_shape(node))})


def _select_scatter(node: Node) -> _Lowered:
    """x with src written at index i of dim: a slice_scatter of width 1 (src given the dim)."""
    x, src = node.args[:2]
    shape = _shape(x)
    dim, index = int(node.args[2]) % len(shape), int(node.args[3]) % shape[int(node.args[2]) % len(shape)]
    return _Lowered("slice_scatter", [x, src], {"dim": dim, "start": index, "end": index + 1, "step": 1, "select": True})


def _fftn(node: Node) -> _Identity | _Unsupported:
    """fft_fftn read only by `real` (FNet's Fourier mixing): `real` lowers the pair (or,
    where export decomposed `real`, the select of view_as_real's real plane)."""
    if not all(user.target == _resolve("real.default") or _real_plane(user) for user in node.users):
        return _Unsupported("fft_fftn whose complex result is read other than by real")
    if _arg(node, 1, "s") is not None or _arg(node, 3, "norm") not in (None, "backward"):
        return _Unsupported("fft_fftn with a size or a norm; the real part of a plain fftn only")
    if _val(node.args[0]).is_complex():
        return _Unsupported("fft_fftn of a complex input")
    return _Identity(node.args[0])  # the real input, read by `real` below


def _real_plane(node: Node) -> bool:
    """view_as_real read only as its real plane (select of index 0 on its last dim)."""
    if node.target != _resolve("view_as_real.default") or not node.users:
        return False
    rank = len(_shape(node))
    return all(user.target == _resolve("select.int") and int(user.args[1]) % rank == rank - 1
               and int(user.args[2]) == 0 for user in node.users)


def _view_as_real(node: Node) -> _Identity | _Unsupported:
    if not _real_plane(node) or not isinstance(node.args[0], Node) \
            or node.args[0].target != _resolve("fft_fftn.default"):
        return _Unsupported("view_as_real other than fft_fftn's real plane")
    return _Identity(node.args[0])  # its real-plane select lowers the fft (below)


def _real_of_fftn(node: Node) -> _Lowered | _Unsupported:
    fft = node.args[0]
    if not isinstance(fft, Node) or fft.target != _resolve("fft_fftn.default"):
        return _Unsupported("real of a complex tensor other than fft_fftn's")
    rank = len(_shape(fft))
    dims = _arg(fft, 2, "dim")
    dims = sorted({int(d) % rank for d in (range(rank) if dims is None else dims)})
    return _Lowered("dft_real", [fft.args[0]], {"dims": dims})


def _sdpa(node: Node) -> _Lowered | _Unsupported:
    q, k, v = node.args[:3]
    mask = _arg(node, 3, "attn_mask")
    if _arg(node, 4, "dropout_p", 0.0):
        return _Unsupported("attention dropout (call load() in eval mode)")
    if node.kwargs.get("enable_gqa"):
        return _Unsupported("enable_gqa; group query heads by KV head in the model instead")
    qs, ks, vs = _shape(q), _shape(k), _shape(v)
    # K and V may broadcast over batch or head dims (multi-query attention: one KV head
    # for every query head); the matrix products read them in place, no copies.
    batch_dims = _shape(node)[:-2]
    if any(len(s) != len(qs) or any(d not in (1, b) for d, b in zip(s[:-2], batch_dims)) for s in (ks, vs)) \
            or qs[:-2] != batch_dims:
        return _Unsupported("attention whose query broadcasts over batch or head dims")
    scale = node.kwargs.get("scale")
    attrs = {"batch": math.prod(batch_dims), "S": qs[-2], "T": ks[-2], "D": qs[-1], "Dv": vs[-1],
             "scale": float(scale) if scale is not None else None,
             "is_causal": bool(_arg(node, 5, "is_causal", False)), "has_mask": isinstance(mask, Node)}
    return _Lowered("sdpa", [q, k, v] + ([mask] if isinstance(mask, Node) else []), attrs)


def _rnn(node: Node) -> _Lowered | _Unsupported:
    """aten.lstm / aten.gru: hoisted input products and one `scan` op a layer and direction
    (dse/workload/scan_capture.py)."""
    attrs = handler_attrs(node)
    if isinstance(attrs, str):
        return _Unsupported(attrs)
    hx = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
    inputs = [node.args[0], *hx, *node.args[2]]
    if not all(isinstance(x, Node) for x in inputs):
        return _Unsupported("a recurrent layer with a non-tensor state or weight")
    return _Lowered("rnn", inputs, attrs)


_MULTI_OUTPUT = {
    name for name in ("_native_batch_norm_legit_no_training.default", "native_layer_norm.default",
                      "max_pool2d_with_indices.default")
}


# Ops whose outputs are views of their input's parts: each item read (`getitem`) becomes a
# slice (or a select, for unbind); the op itself moves no data.
_SPLITS = ("split.Tensor", "split_with_sizes.default", "chunk.default", "unbind.int")


def _split(node: Node) -> _Identity:
    return _Identity(node.args[0])  # its items are read through getitem (`_split_item`)


def _split_sizes(node: Node, length: int) -> list[int]:
    name = str(node.target).removeprefix("aten.")
    if name == "split_with_sizes.default":
        return [int(v) for v in node.args[1]]
    if name == "chunk.default":
        per = -(-length // int(node.args[1]))
        return [min(per, length - lo) for lo in range(0, length, per)]
    per = int(node.args[1])  # split.Tensor: pieces of split_size, the last one shorter
    return [min(per, length - lo) for lo in range(0, length, per)]


def _split_item(source: Node, index: int) -> _Lowered | _Identity:
    x = source.args[0]
    shape = _shape(x)
    name = str(source.target).removeprefix("aten.")
    dim = int(_arg(source, 1 if name == "unbind.int" else 2, "dim", 0)) % len(shape)
    if name == "unbind.int":
        return _Lowered("select", [x], {"dim": dim, "index": int(index)})
    sizes = _split_sizes(source, shape[dim])
    start = sum(sizes[:index])
    if (start, sizes[index]) == (0, shape[dim]):
        return _Identity(x)
    return _Lowered("slice", [x], {"dim": dim, "start": start, "end": start + sizes[index], "step": 1})


# (values, indices) pairs: item 0 is amax / amin over the dim, item 1 argmax / argmin.
_EXTREME_PAIRS = {"max.dim": ("amax", "argmax"), "min.dim": ("amin", "argmin")}


def _pair(node: Node) -> _Identity:
    return _Identity(node.args[0])  # its items are read through getitem (`_pair_item`)


def _pair_item(source: Node, index: int) -> _Lowered:
    x = source.args[0]
    dim = int(source.args[1]) % len(_shape(x))
    keepdim = bool(_arg(source, 2, "keepdim", False))
    values, positions = _EXTREME_PAIRS[str(source.target).removeprefix("aten.")]
    if index == 0:
        return _Lowered(values, [x], {"dims": [dim], "keepdim": keepdim})
    return _Lowered(positions, [x], {"dim": dim, "keepdim": keepdim})


def _topk_item(source: Node, index: int) -> _Lowered:
    """torch.topk's values (item 0) or int64 indices (item 1): a router's choice."""
    x = source.args[0]
    attrs = {"k": int(source.args[1]), "dim": int(_arg(source, 2, "dim", -1)) % len(_shape(x)),
             "largest": bool(_arg(source, 3, "largest", True)), "sorted": bool(_arg(source, 4, "sorted", True))}
    return _Lowered("topk", [x], {**attrs, "item": int(index)})


def _sort_item(source: Node, index: int) -> _Lowered:
    """torch.sort's values (item 0) or int64 indices (item 1)."""
    x = source.args[0]
    name = str(source.target).removeprefix("aten.")
    stable = bool(source.kwargs.get("stable") or False) if name == "sort.stable" else False
    at = 1 if name == "sort.default" else 2  # sort.stable(x, *, stable, dim, descending)
    dim = int(source.kwargs.get("dim", source.args[at] if len(source.args) > at else -1))
    descending = bool(source.kwargs.get("descending", source.args[at + 1] if len(source.args) > at + 1 else False))
    return _Lowered("sort", [x], {"dim": dim % max(len(_shape(x)), 1), "descending": descending, "stable": stable,
                                  "item": int(index)})


def _aten_call(kind: str, call: AtenCall) -> Callable[[Node], _Lowered]:
    """An op declared as one aten call with attributes (`AtenCall`): its inputs, and each
    attribute read from the call by its rule."""
    def lower(node: Node) -> _Lowered:
        inputs = list(node.args[:call.inputs])
        attrs = {}
        for attr in call.attrs:
            given = node.args[attr.at] if attr.at is not None and len(node.args) > attr.at \
                else node.kwargs.get(attr.name)
            if attr.rule == "axis":
                attrs[attr.name] = int(given) % max(len(_shape(inputs[0])), 1)
            elif attr.rule == "dtype":
                attrs[attr.name] = dtype_name(given) if given is not None else None
            elif attr.rule == "out_last":
                attrs[attr.name] = _shape(node)[-1]
            else:
                raise ValueError(f"aten call {kind}: attribute {attr.name} has no rule {attr.rule!r}")
        return _Lowered(kind, inputs, attrs)
    return lower


def _scatter(node: Node) -> _Lowered | None:
    """scatter(x, dim, index, src or a scalar value); no reduce."""
    x, dim, index, src = node.args[:4]
    if node.kwargs.get("reduce") is not None or len(node.args) > 4:
        return None
    dim = int(dim) % len(_shape(x))
    if isinstance(src, Node):
        return _Lowered("scatter", [x, index, src], {"dim": dim})
    if not isinstance(src, (int, float, bool)):
        return None
    return _Lowered("scatter", [x, index], {"dim": dim, "value": src})


def _scatter_add(node: Node) -> _Lowered:
    x, dim, index, src = node.args[:4]
    return _Lowered("scatter_add", [x, index, src], {"dim": int(dim) % len(_shape(x))})


def _getitem(node: Node) -> _Lowered | _Identity | _Unsupported:
    source, index = node.args
    name = str(getattr(source, "target", "")).removeprefix("aten.")
    if isinstance(source, Node) and name == "topk.default":
        return _topk_item(source, int(index))
    if isinstance(source, Node) and name in ("sort.default", "sort.stable"):
        return _sort_item(source, int(index))
    if isinstance(source, Node) and name in _EXTREME_PAIRS:
        return _pair_item(source, int(index))
    if isinstance(source, Node) and name in _MULTI_OUTPUT and index == 0:
        return _Identity(source)
    if isinstance(source, Node) and name in _SPLITS:
        return _split_item(source, int(index))
    if isinstance(source, Node) and name in RNN_TARGETS:  # (output, h_n[, c_n]): the scan gives the output
        if index == 0 or unused_state(node):
            return _Identity(source)
        return _Unsupported(f"h_n / c_n of {name} read by the model (read its output sequence)")
    return _Unsupported(f"output {index} of {name or source}")


def _resolve(qualified: str) -> torch._ops.OpOverload | None:
    packet, overload = qualified.split(".")
    return getattr(getattr(aten, packet, None), overload, None)


_HANDLER_NAMES: dict[str, _Handler] = {
    "linear.default": _linear,
    **{name: _matmul for name in ("matmul.default", "mm.default", "bmm.default")},
    "addmm.default": _addmm,
    **{f"add.{o}": _binary("add") for o in ("Tensor", "Scalar")},
    **{f"sub.{o}": _binary("sub") for o in ("Tensor", "Scalar")},
    **{f"rsub.{o}": _binary("sub", reverse=True) for o in ("Tensor", "Scalar")},
    **{f"mul.{o}": _binary("mul") for o in ("Tensor", "Scalar")},
    "maximum.default": _binary("maximum"),
    "minimum.default": _binary("minimum"),
    "copy.default": _copy,
    "select_scatter.default": _select_scatter,
    **{f"div.{o}": _binary("div") for o in ("Tensor", "Scalar", "Tensor_mode", "Scalar_mode")},
    **{name: _clamp() for name in ("hardtanh.default", "clamp.default", "clamp_min.default", "clamp_max.default")},
    "relu6.default": _clamp(0.0, 6.0),
    "leaky_relu.default": _leaky_relu,
    "gelu.default": _gelu,
    **{
        name: _reshape
        for name in (
            "view.default", "reshape.default", "_unsafe_view.default", "flatten.using_ints",
            "squeeze.default", "squeeze.dim", "squeeze.dims", "unsqueeze.default",
        )
    },
    "permute.default": _permute,
    "transpose.int": _transpose,
    "swapaxes.default": _transpose,
    "swapdims.default": _transpose,
    "t.default": _t,
    "mT.default": _matrix_t,
    **{name: _identity for name in ("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default")},
    "dropout.default": _dropout,
    # convN d of rank N = its place in CONV_KINDS, as the interpreter reads it
    **{f"{kind}.{o}": _conv_nd(rank) for rank, kind in enumerate(CONV_KINDS, 1) for o in ("default", "padding")},
    "convolution.default": _convolution,
    "batch_norm.default": _batch_norm(5, 7),
    "_native_batch_norm_legit_no_training.default": _batch_norm(None, 6),
    "layer_norm.default": _layer_norm,
    "native_layer_norm.default": _layer_norm,
    "softmax.int": _softmax,
    "_softmax.default": _softmax,
    "mean.dim": _reduce("mean"),
    "mean.default": _mean_all,
    "sum.dim_IntList": _reduce("sum"),
    "pow.Tensor_Scalar": _pow,
    "softplus.default": _softplus,
    **{f"{kind}.default": _unary(kind) for kind in ATEN_ELEMENTWISE},
    "embedding.default": _embedding,
    "max_pool2d.default": _max_pool2d,
    "max_pool2d_with_indices.default": _max_pool2d,
    "avg_pool2d.default": _avg_pool2d,
    "adaptive_avg_pool2d.default": _adaptive_avg_pool2d,
    "_adaptive_avg_pool2d.default": _adaptive_avg_pool2d,
    "linalg_vector_norm.default": _vector_norm,
    "repeat.default": _repeat,
    "cat.default": _cat("cat"),
    "stack.default": _cat("stack"),
    "slice.Tensor": _slice,
    "slice_scatter.default": _slice_scatter,
    "fft_fftn.default": _fftn,
    "real.default": _real_of_fftn,
    "view_as_real.default": _view_as_real,
    "select.int": _select,
    "expand.default": _expand,
    **{name: _split for name in _SPLITS},
    **{name: _where for name in ("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")},
    **{name: _masked_fill for name in ("masked_fill.Scalar", "masked_fill.Tensor")},
    **{name: _pad for name in ("constant_pad_nd.default", "pad.default")},
    "index.Tensor": _index,
    "group_norm.default": _group_norm,
    "roll.default": _roll,
    **{name: _upsample for name in ("upsample_nearest2d.vec", "upsample_bilinear2d.vec", "upsample_nearest1d.vec")},
    "amax.default": _reduce("amax"),
    "max.default": _extreme("amax"),
    "min.default": _extreme("amin"),
    **{name: _pair for name in _EXTREME_PAIRS},
    "argmax.default": _arg_extreme("argmax"),
    "argmin.default": _arg_extreme("argmin"),
    "gather.default": _gather,
    "index_select.default": _index_select,
    "topk.default": _pair,
    "sort.default": _pair,
    "sort.stable": _pair,
    **{f"{kind}.{call.overload}": _aten_call(kind, call) for kind, call in ATEN_CALLS.items()},
    **{name: _scatter for name in ("scatter.value", "scatter.src")},
    "scatter_add.default": _scatter_add,
    "bitwise_not.default": _unary("bitwise_not"),
    "amin.default": _reduce("amin"),
    "scaled_dot_product_attention.default": _sdpa,
    **{name: _rnn for name in RNN_TARGETS},
    **{name: _same_dtype_copy for name in ("_to_copy.default", "to.dtype", "to.dtype_layout", "to.device")},
}
_HANDLERS: dict[Any, _Handler] = {
    op: handler for name, handler in _HANDLER_NAMES.items() if (op := _resolve(name)) is not None
}
_HANDLERS[operator.getitem] = _getitem
_HANDLERS[torch.ops.dse.moe_experts.default] = lambda node: _Lowered("moe_experts", list(node.args[:3]), {})
# Export's runtime checks on shapes and dtypes: no value flows through them.
_ASSERTIONS = {
    op
    for name in ("_assert_tensor_metadata.default", "_assert_scalar.default", "_assert_async.msg",
                 "sym_constrain_range_for_size.default")
    if (op := _resolve(name)) is not None
}
SUPPORTED_ATEN_OPS = ", ".join(sorted({f"aten.{name.split('.')[0]}" for name in _HANDLER_NAMES}
                                       - {f"aten.{name.split('.')[0]}" for name in _MULTI_OUTPUT}))

# Ops decomposition must leave whole: they are what the dse kinds describe.
_KEEP_WHOLE = ("linear.default", "matmul.default", "gelu.default", "silu.default", "conv1d.default",
               "conv2d.default", "conv1d.padding", "conv2d.padding", "layer_norm.default", "softmax.int",
               "scaled_dot_product_attention.default", "max_pool2d.default", "adaptive_avg_pool2d.default",
               "stack.default", "hardtanh.default", "relu6.default", "hardswish.default", "hardsigmoid.default",
               "mish.default", "leaky_relu.default", "pad.default", "group_norm.default", "roll.default",
               "upsample_nearest2d.vec", "upsample_bilinear2d.vec", "upsample_nearest1d.vec", "fft_fftn.default",
               "real.default", "softplus.default", *RNN_TARGETS, *_SPLITS,
               *(f"{kind}.{call.overload}" for kind, call in ATEN_CALLS.items()))


def _decomposition_table() -> dict:
    table = torch.export.default_decompositions()
    for name in _KEEP_WHOLE:
        op = _resolve(name)
        if op in table:
            del table[op]
    return table


def _pick_frame(stack_trace: str | None, source_path: Path | None) -> tuple[str, str, str]:
    """(file, line, code) of the frame worth showing: the recipe's own file when known,
    else the last frame outside torch (nn.Linear's own forward says nothing), else the last."""
    frames = [m.groupdict() for m in _FRAME.finditer(stack_trace or "")]
    if not frames:
        return "", "", ""
    recipe = str(source_path.resolve()) if source_path else None
    in_recipe = [f for f in frames if recipe and str(Path(f["file"]).resolve()) == recipe]
    outside_torch = [f for f in frames if not f["file"].startswith(_TORCH_DIR)]
    frame = (in_recipe or outside_torch or frames)[-1]
    return frame["file"], frame["line"], frame["code"]


def _source(node: Node, source_path: Path | None) -> str:
    file, line, _ = _pick_frame(node.meta.get("stack_trace"), source_path)
    # basename only: the dump must not change with the checkout's location
    return f"{Path(file).name}:{line}" if file else "<unknown>"


class _Builder:
    def __init__(self, exported: ExportedProgram, name: str, source_path: Path | None,
                 original: ExportedProgram | None = None, experts: list | None = None):
        self.experts = list(experts or [])  # the experts modules, in the order they are called
        self.exported = exported
        self.name = name
        self.source_path = source_path
        self.original = original  # the undecomposed program, to name the op the user wrote
        self.tensors: dict[str, TensorSpec] = {}
        self.weights: dict[str, Any] = {}
        self.inputs: list[str] = []
        self.ops: list[Op] = []
        self.aliases: dict[str, str] = {}
        self.constants: set[str] = set()
        self.unsupported: dict[str, list[tuple[str, str, str]]] = {}  # op -> (source, code, file) per use
        self.unsupported_nodes: set[str] = set()

    def build(self) -> Graph:
        self._placeholders()
        self.folded = fold_input_free(self.exported)
        for node in self.exported.graph.nodes:
            if node.op == "call_function" and node.name in self.folded:
                self._constant(node)
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                outputs = self._outputs(node)
            elif node.op != "placeholder":
                self._note_unsupported(node, f"{node.op} {node.target}")
        if self.unsupported:
            self._raise_unsupported()
        used = {name for op in self.ops for name in op.inputs} | set(outputs)
        weights = {name: array for name, array in self.weights.items() if name in used}
        live = set(self.inputs) | set(weights) | {op.outputs[0] for op in self.ops}
        tensors = {name: spec for name, spec in self.tensors.items() if name in live}
        return Graph(self.name, self.ops, tensors, self.inputs, outputs, weights)

    def _spec(self, node: Node) -> TensorSpec:
        val = _val(node)
        if not isinstance(val, torch.Tensor):
            self._unsupported(node, f"{node.target} (non-tensor value {type(val).__name__})")
        spec = TensorSpec(node.name, _shape(node), dtype_name(val.dtype))
        self.tensors[node.name] = spec
        return spec

    def _placeholders(self) -> None:
        signature = self.exported.graph_signature
        nodes = {n.name: n for n in self.exported.graph.nodes if n.op == "placeholder"}
        for spec in signature.input_specs:
            if not isinstance(spec.arg, TensorArgument):
                raise InputError(self._file(), "workload.inputs", str(spec.arg), "tensor inputs only")
            node = nodes[spec.arg.name]
            self._spec(node)
            if spec.kind == InputKind.USER_INPUT:
                self.inputs.append(node.name)
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                value = self.exported.state_dict.get(spec.target)
                if value is None:
                    value = self.exported.constants[spec.target]
                # The module's own memory, not a copy: a real layer's weights are GBs, and the
                # frontend keeps the module (for its checks) while it steps the graph.
                self.weights[node.name] = weight_array(value, copy=False)
                self.constants.add(node.name)
            else:
                raise InputError(self._file(), "workload.inputs", f"{spec.kind.name} {spec.target}",
                                 "user inputs, parameters, buffers and tensor constants")

    def _constant(self, node: Node) -> None:
        """A node computed from no user input: a constant of the graph where an op reads it
        (positions, masks, index tables, rotary tables, shape arithmetic)."""
        value = self.folded[node.name]
        if not isinstance(value, torch.Tensor):
            return  # a Python value (a size, a dtype): read by its users' handlers from the node
        if not any(user.name not in self.folded for user in node.users):
            return  # read by other folded nodes only
        self.tensors[node.name] = TensorSpec(node.name, tuple(value.shape), dtype_name(value.dtype))
        self.weights[node.name] = weight_array(value)
        self.constants.add(node.name)

    def _call(self, node: Node) -> None:
        if node.target in _ASSERTIONS:
            return
        if node.target is operator.getitem and node.args[0].name in self.unsupported_nodes:
            self.unsupported_nodes.add(node.name)  # an item of an op already reported
            if isinstance(_val(node), torch.Tensor):
                self._spec(node)  # its readers are read on, as an unsupported op's are
            return
        handler = _HANDLERS.get(node.target)
        lowered = handler(node) if handler else None
        if lowered is None or isinstance(lowered, _Unsupported):
            self.unsupported_nodes.add(node.name)
            reason = f" ({lowered.reason})" if isinstance(lowered, _Unsupported) else ""
            self._note_unsupported(node, f"{node.target}{reason}")
            if isinstance(_val(node), torch.Tensor):
                self._spec(node)  # its users are read on, to find what else is unsupported
            return
        if isinstance(lowered, _Identity):
            self.aliases[node.name] = self._name(lowered.source)
            return
        inputs = [self._name(x) for x in lowered.inputs]
        output = self._spec(node)
        if any(n not in self.tensors for n in inputs):  # it reads what an unsupported op left unknown
            self.unsupported_nodes.add(node.name)
            return
        if lowered.kind == "rnn":
            emitter = ScanEmitter(self, node, _source(node, self.source_path))
            out = emitter.run(inputs, lowered.attrs)
            if out is None:
                self.unsupported_nodes.add(node.name)
                self._note_unsupported(node, f"{node.target} ({emitter.reason})")
                return
            self.aliases[node.name] = out
            self.tensors.pop(output.name, None)
            return
        if lowered.kind == "dft_real":
            self._dft_real(node, inputs[0], lowered.attrs["dims"], output)
            return
        if lowered.kind == "moe_experts":
            module = self.experts.pop(0)
            reason = moe.unsupported_reason(module)
            if reason:
                self.unsupported_nodes.add(node.name)
                self._note_unsupported(node, f"{type(module).__name__} ({reason})")
                return
            moe.expand_experts(self, node, module, inputs, output, _source(node, self.source_path))
            return
        counts = count_op(lowered.kind, lowered.attrs, [self.tensors[n] for n in inputs], output, self.constants)
        if lowered.kind in MOVE_KINDS and all(n in self.constants for n in inputs):
            self.constants.add(output.name)  # a transposed weight is still a weight
        self.ops.append(Op(node.name, lowered.kind, inputs, [output.name], lowered.attrs,
                           _source(node, self.source_path), counts))

    def _dft_real(self, node: Node, x: str, dims: list[int], output: TensorSpec) -> None:
        """real(fftn(x, dims)) of a real x as DFT products, one dim at a time (the DFT is
        separable), each a `linear` by constant cos / sin matrices for the matrix Ball:
        with F = C - iS along a dim, (re + i im) F = (re C + im S) + i (im C - re S). The
        last dim first (no transpose); only the final dim's real part is kept."""
        source = _source(node, self.source_path)
        rank = len(output.shape)
        order = sorted(dims, reverse=True)

        def emit(kind, inputs, shape, attrs, hint):
            name = f"{node.name}_{hint}"
            spec = TensorSpec(name, tuple(shape), output.dtype)
            self.tensors[name] = spec
            counts = count_op(kind, attrs, [self.tensors[n] for n in inputs], spec, self.constants)
            self.ops.append(Op(name, kind, inputs, [name], attrs, source, counts))
            return name

        def weight(hint, array):
            name = f"{node.name}_{hint}"
            self.tensors[name] = TensorSpec(name, array.shape, "float32")
            self.weights[name] = array
            self.constants.add(name)
            return name

        def product(t, w, hint):
            shape = self.tensors[t].shape
            attrs = {"M": math.prod(shape[:-1]), "N": shape[-1], "K": shape[-1], "batch": 1, "has_bias": False}
            return emit("linear", [t, w], shape, attrs, hint)

        def swap(t, d, hint):
            dims_ = list(range(rank))
            dims_[d], dims_[-1] = dims_[-1], dims_[d]
            shape = self.tensors[t].shape
            return emit("permute", [t], tuple(shape[i] for i in dims_), {"dims": dims_}, hint)

        re, im = x, None
        for i, d in enumerate(order):
            n = output.shape[d]
            k = np.arange(n)
            angle = 2 * np.pi * ((k[:, None] * k[None, :]) % n) / n  # exact phases: k n mod N first
            cos, sin = np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)
            last = i == len(order) - 1
            if d != rank - 1:
                re = swap(re, d, f"re{i}_t")
                im = swap(im, d, f"im{i}_t") if im is not None else None
            c = weight(f"dft{i}_cos", cos)
            s = weight(f"dft{i}_sin", sin)
            re_c = product(re, c, f"re{i}_cos")
            new_re = re_c if im is None else emit("add", [re_c, product(im, s, f"im{i}_sin")],
                                                   self.tensors[re_c].shape, {}, f"re{i}")
            if not last:
                neg = weight(f"dft{i}_neg_sin", -sin)
                re_s = product(re, neg, f"re{i}_negsin")
                im = re_s if im is None else emit("add", [product(im, c, f"im{i}_cos"), re_s],
                                                  self.tensors[re_s].shape, {}, f"im{i}")
            re = new_re
            if d != rank - 1:
                re = swap(re, d, f"re{i}_back")
                im = swap(im, d, f"im{i}_back") if im is not None and not last else im
        self.aliases[node.name] = re
        self.tensors.pop(output.name, None)

    def _outputs(self, node: Node) -> list[str]:
        kinds = [spec.kind for spec in self.exported.graph_signature.output_specs]
        if any(kind != OutputKind.USER_OUTPUT for kind in kinds):
            raise InputError(self._file(), "workload.outputs", ", ".join(k.name for k in kinds),
                             "USER_OUTPUT only (the model must not mutate its inputs or buffers)")
        outputs = []
        for value in node.args[0]:
            if not isinstance(value, Node):
                raise InputError(self._file(), "workload.outputs", repr(value), "tensor outputs only")
            outputs.append(self._name(value))
        return outputs

    def _name(self, node: Node) -> str:
        return self.aliases.get(node.name, node.name)

    def _file(self) -> str:
        return str(self.source_path) if self.source_path else "<module>"

    def _unsupported(self, node: Node, op: str) -> None:
        self._note_unsupported(node, op)
        self._raise_unsupported()

    def _note_unsupported(self, node: Node, op: str) -> None:
        """Remember an op the graph cannot hold; the capture goes on to find the others."""
        original = self._original_target(node)
        if original and original != op:
            op = f"{original} (decomposed to {op})"
        file, _, code = _pick_frame(node.meta.get("stack_trace"), self.source_path)
        self.unsupported.setdefault(op, []).append((_source(node, self.source_path), code, file))

    def _raise_unsupported(self) -> None:
        ops = [Unsupported(op, len(uses), uses[0][0], uses[0][1]) for op, uses in self.unsupported.items()]
        first_file = next(iter(self.unsupported.values()))[0][2]
        raise UnsupportedOpError(ops[0].op, ops[0].source, self.source_path or first_file or "<module>",
                                 SUPPORTED_ATEN_OPS, ops[0].code, ops)

    def _original_target(self, node: Node) -> str | None:
        if self.original is None:
            return None
        names = {n.name: n for n in self.original.graph.nodes}
        for source in node.meta.get("from_node") or []:
            if source.name in names:
                return str(names[source.name].target)
        return None


# Ops whose value depends on their first input's shape and dtype only.
_SHAPE_ONLY = ("full_like", "zeros_like", "ones_like", "new_full", "new_zeros", "new_ones")
# Ops whose value is not a function of their inputs: never folded.
_NONDETERMINISTIC = ("rand", "bernoulli", "normal", "uniform", "dropout", "empty", "multinomial", "poisson")


def fold_input_free(exported: ExportedProgram) -> dict[str, Any]:
    """The value of every call node that depends on no user input and no parameter: index,
    mask and position ops (`arange`, comparisons, `cumsum`, `full`, `where` on such values,
    ...) computed from shapes, buffers and tensor constants. They are evaluated here, with
    the very aten ops the model runs, so the graph sees their results as constants.
    A subgraph of ops on parameters alone is folded when the graph has no kind for one of
    its ops (a weight norm's reparametrisation, NF-Nets' weight standardisation by a batch
    norm with no running statistics): that op, the parameter-only ops it reads (a gain
    multiplied in) and those that read it. Ops on weights that the graph can hold, with no
    such op among them, stay ops (the frontend steps read them: a transposed weight)."""
    signature = exported.graph_signature
    values: dict[str, Any] = {}
    from_parameters: set[str] = set()  # values computed from a parameter
    for spec in signature.input_specs:
        if spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.PARAMETER) \
                and isinstance(spec.arg, TensorArgument):
            value = exported.state_dict.get(spec.target)
            if value is None:
                value = exported.constants.get(spec.target)
            if isinstance(value, torch.Tensor):
                values[spec.arg.name] = value
                if spec.kind == InputKind.PARAMETER:
                    from_parameters.add(spec.arg.name)
    folded: dict[str, Any] = {}
    held: dict[str, Node] = {}  # parameter-only ops the graph holds: folded only beside one it does not
    unheld: list[Node] = []  # parameter-only ops it does not hold, in order (evaluated at the end)
    for node in exported.graph.nodes:
        if node.op != "call_function" or node.target in _ASSERTIONS:
            continue
        if any(word in str(node.target) for word in _NONDETERMINISTIC):
            continue
        inputs = [x for x in node.all_input_nodes]
        on_parameters = any(x.name in from_parameters for x in inputs)
        if on_parameters:
            if all(x.name in values or x.name in from_parameters for x in inputs):
                from_parameters.add(node.name)
                if node.target in _HANDLERS:
                    held[node.name] = node
                else:
                    unheld.append(node)
            continue
        shape_only = str(node.target).split(".")[-2] in _SHAPE_ONLY if "." in str(node.target) else False
        if not all(x.name in values or (shape_only and i == 0) for i, x in enumerate(inputs)):
            continue
        known = values
        if shape_only and inputs[0].name not in values:  # its value is its input's shape and dtype alone
            meta = inputs[0].meta.get("val")
            if not isinstance(meta, torch.Tensor):
                continue
            known = {**values, inputs[0].name: torch.zeros(tuple(meta.shape), dtype=meta.dtype)}
        # Folding a lone creation op that nothing but input-dependent ops read still pays:
        # its users then see a constant. Evaluate with the node's own arguments.
        value = _evaluate(node, known)
        if value is not _NOT_EVALUABLE:
            values[node.name] = folded[node.name] = value
    _fold_parameter_subgraphs(held, unheld, values, folded)
    return folded


_NOT_EVALUABLE = object()


def _evaluate(node: Node, known: dict[str, Any]) -> Any:
    args = torch.fx.node.map_arg(node.args, lambda x: known[x.name])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda x: known[x.name])
    try:
        with torch.no_grad():
            return node.target(*args, **kwargs)
    except Exception:  # not evaluable here (a custom op): left to the handlers
        return _NOT_EVALUABLE


def _fold_parameter_subgraphs(held: dict[str, Node], unheld: list[Node], values: dict, folded: dict) -> None:
    """Fold each op the graph cannot hold that reads parameters alone, with the held
    parameter-only ops it reads (transitively) and those that read it."""
    if not unheld:
        return
    fold = {node.name for node in unheld}
    stack = list(unheld)
    while stack:  # the parameter-only ops they read
        for x in stack.pop().all_input_nodes:
            if x.name in held and x.name not in fold:
                fold.add(x.name)
                stack.append(held[x.name])
    order = list(next(iter(unheld)).graph.nodes)
    for node in order:  # and those that read them, in graph order
        if node.name in held and any(x.name in fold for x in node.all_input_nodes):
            fold.add(node.name)
    for node in order:
        if node.name not in fold:
            continue
        if not all(x.name in values for x in node.all_input_nodes):
            continue  # an input was not evaluable: left to the handlers (reported if unsupported)
        value = _evaluate(node, values)
        if value is not _NOT_EVALUABLE:
            values[node.name] = folded[node.name] = value


def _export(module: torch.nn.Module, example_inputs: tuple, source_path: Path | None) -> ExportedProgram:
    # torch.export writes its partial graphs and guard warnings to stderr when it fails:
    # the user gets dse's one line instead (the full text stays on the error's cause).
    chatter = io.StringIO()
    try:
        with contextlib.redirect_stderr(chatter), _quiet_logging():
            return torch.export.export(module, tuple(example_inputs))
    except Exception as error:  # a model export cannot capture is bad input, not a crash
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        where = _user_frame(error, source_path)
        raise InputError(
            source_path or type(module).__name__, "workload.capture",
            f"{type(error).__name__}: {first_line}" + (f" at {where}" if where else ""),
            "a module torch.export captures as one graph (static shapes, no data-dependent control flow)",
        ) from error


@contextlib.contextmanager
def _quiet_logging():
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def _user_frame(error: BaseException, source_path: Path | None) -> str:
    """Where in the model's own code the export failed: the deepest frame of the recipe's
    file (else of any file outside torch), as `model.py:4 ('if x.sum() > 0:')`."""
    frames = traceback.extract_tb(error.__traceback__)
    torch_dir = str(Path(torch.__file__).parent)
    ours = [f for f in frames if source_path is not None and Path(f.filename) == Path(source_path)]
    ours = ours or [f for f in frames if not f.filename.startswith(torch_dir) and "/dse/" not in f.filename
                    and not f.filename.startswith("<")]
    if not ours:
        return ""
    frame = ours[-1]
    code = f" ({frame.line.strip()!r})" if frame.line else ""
    return f"{Path(frame.filename).name}:{frame.lineno}{code}"


def flat_outputs(value: Any) -> list[torch.Tensor]:
    """A module's outputs as the graph's outputs, in the graph's order: tensors, tuples,
    lists, dicts and transformers' `ModelOutput`s flattened as torch.export flattens them
    (`torch.utils._pytree`: nested in order, dict-like values in key order of insertion;
    None entries dropped)."""
    return [leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def capture(module: torch.nn.Module, *example_inputs: Any, name: str = "graph",
            source_path: str | Path | None = None) -> Graph:
    """Capture `module(*example_inputs)` as a dse Graph.

    `source_path` (the recipe's model.py) is named in errors and picks the source
    line of each op."""
    source_path = Path(source_path) if source_path is not None else None
    with moe.experts_as_one_op(module, example_inputs) as experts:
        exported = _export(module, example_inputs, source_path)
    try:
        return reroll(_Builder(exported, name, source_path, experts=experts).build())
    except UnsupportedOpError:
        pass  # decompose below, outside the handler, so the error chain stays short
    with warnings.catch_warnings():
        # torch's own deprecation inside run_decompositions; nothing a recipe can fix
        warnings.filterwarnings("ignore", r".*isinstance\(treespec, LeafSpec\)", FutureWarning)
        decomposed = exported.run_decompositions(_decomposition_table())
    return reroll(_Builder(decomposed, name, source_path, original=exported, experts=experts).build())
