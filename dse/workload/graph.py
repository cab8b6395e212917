"""The captured workload: a flat list of typed ops over named tensors.

The graph is plain data (dataclasses, numpy weights) so that mapping, the analytical
model and lowering can read it without torch. `Graph.run` is the reference
interpreter: it executes the dse ops (not the original module) so a capture, and any
frontend step that rewrites the graph, can be checked against PyTorch.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

MATMUL_KINDS = ("linear", "matmul")
BINARY_KINDS = ("add", "sub", "mul", "div")
ACTIVATION_KINDS = ("relu", "gelu", "silu")
LAYOUT_KINDS = ("reshape", "permute")
KINDS = MATMUL_KINDS + BINARY_KINDS + ACTIVATION_KINDS + LAYOUT_KINDS


def torch_dtype(dtype: str) -> torch.dtype:
    return getattr(torch, dtype)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def itemsize(dtype: str) -> int:
    return torch_dtype(dtype).itemsize


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


@dataclass
class Graph:
    name: str
    ops: list[Op]
    tensors: dict[str, TensorSpec]
    inputs: list[str]
    outputs: list[str]
    weights: dict[str, np.ndarray] = field(default_factory=dict)

    def ops_of_kind(self, *kinds: str) -> list[Op]:
        return [op for op in self.ops if op.kind in kinds]

    def run(self, *inputs: torch.Tensor | np.ndarray) -> list[torch.Tensor]:
        """Execute the dse ops in torch; returns the graph outputs in order."""
        if len(inputs) != len(self.inputs):
            raise ValueError(f"graph {self.name!r} takes {len(self.inputs)} inputs, got {len(inputs)}")
        values: dict[str, torch.Tensor] = {}
        for name, value in zip(self.inputs, inputs):
            tensor = torch.as_tensor(value)
            spec = self.tensors[name]
            if tuple(tensor.shape) != spec.shape:
                raise ValueError(f"input {name!r}: expected shape {spec.shape}, got {tuple(tensor.shape)}")
            values[name] = tensor
        for name, array in self.weights.items():
            values[name] = weight_tensor(array, self.tensors[name].dtype)
        for op in self.ops:
            args = [values[name] for name in op.inputs]
            values[op.outputs[0]] = _INTERPRETERS[op.kind](op, args)
        return [values[name] for name in self.outputs]

    def counts_frame(self) -> pd.DataFrame:
        columns = ["name", "kind", *(f.name for f in fields(OpCounts)), "source"]
        rows = [
            [op.name, op.kind, *(getattr(op.counts, f.name) for f in fields(OpCounts)), op.source]
            for op in self.ops
        ]
        return pd.DataFrame(rows, columns=columns)

    def totals(self) -> OpCounts:
        """Sum over ops, except weight_bytes: the bytes of the distinct weights, so a
        weight shared by several ops (tied embeddings) counts once, as the model size."""
        summed = sum((op.counts for op in self.ops), OpCounts())
        return OpCounts(
            macs=summed.macs,
            other_ops=summed.other_ops,
            bytes_read=summed.bytes_read,
            bytes_written=summed.bytes_written,
            weight_bytes=sum(self.tensors[name].nbytes for name in self.weights),
        )

    def dump(self) -> str:
        """Stable text form: same graph, same text (no addresses, sorted attrs)."""
        lines = [f"graph {self.name}"]
        lines += [f"input  {name}: {self.tensors[name]}" for name in self.inputs]
        lines += [f"weight {name}: {self.tensors[name]}" for name in self.weights]
        for op in self.ops:
            out = op.outputs[0]
            attrs = ", ".join(f"{key}={op.attrs[key]!r}" for key in sorted(op.attrs))
            c = op.counts
            lines.append(
                f"op     {out}: {self.tensors[out]} = {op.kind}({', '.join(op.inputs)})"
                f" {{{attrs}}} macs={c.macs} other={c.other_ops} read={c.bytes_read}"
                f" written={c.bytes_written} weight={c.weight_bytes} @ {op.source}"
            )
        lines += [f"output {name}: {self.tensors[name]}" for name in self.outputs]
        t = self.totals()
        lines.append(
            f"total  macs={t.macs} other={t.other_ops} read={t.bytes_read}"
            f" written={t.bytes_written} weight={t.weight_bytes}"
        )
        return "\n".join(lines) + "\n"


def weight_array(tensor: torch.Tensor) -> np.ndarray:
    """numpy has no bfloat16: keep its bits as uint16 (the TensorSpec keeps the dtype)."""
    tensor = tensor.detach().cpu().contiguous().clone()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16)
    return tensor.numpy()


def weight_tensor(array: np.ndarray, dtype: str) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    if dtype == "bfloat16":
        return tensor.view(torch.bfloat16)
    return tensor


# --- reference interpreter: one function per kind, reading only kind + attrs ---

def _run_linear(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return F.linear(*args)


def _run_matmul(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    if op.attrs.get("has_bias"):
        a, b, bias = args
        return torch.addmm(bias, a, b, beta=op.attrs.get("beta", 1), alpha=op.attrs.get("alpha", 1))
    return torch.matmul(*args)


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
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


def _run_relu(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.relu(args[0])


def _run_gelu(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return F.gelu(args[0], approximate=op.attrs.get("approximate", "none"))


def _run_silu(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return F.silu(args[0])


def _run_reshape(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return torch.reshape(args[0], op.attrs["shape"])


def _run_permute(op: Op, args: list[torch.Tensor]) -> torch.Tensor:
    return args[0].permute(op.attrs["dims"])


_INTERPRETERS: dict[str, Callable[[Op, list[torch.Tensor]], torch.Tensor]] = {
    "linear": _run_linear,
    "matmul": _run_matmul,
    **{kind: _run_binary for kind in BINARY_KINDS},
    "relu": _run_relu,
    "gelu": _run_gelu,
    "silu": _run_silu,
    "reshape": _run_reshape,
    "permute": _run_permute,
}
