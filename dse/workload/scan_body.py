"""A scan's step as a `Graph` with its source counts (dse/workload/scan.py holds the step's
ops; this module adds what needs the graph and the counts): what the plan, the lowering and
the model read, and the scan op's own counts (its step's, T times)."""

from __future__ import annotations

from typing import Any

from dse.workload.counts import count_op
from dse.workload.graph import Graph, Op, OpCounts, TensorSpec
from dse.workload.scan import bindings, step_ops


def body(op: Op, tensors: dict[str, TensorSpec], weights: dict[str, Any]) -> Graph:
    """The scan's step as a graph: inputs the step's sequence slices and states, outputs the
    step's output and the next states, weights the scan's invariant weights (by their names)."""
    b = bindings(op)
    ops, specs = step_ops(op, tensors)
    constants = {n for n in b["invariant"] if n in weights}
    for o in ops:
        o.counts = count_op(o.kind, o.attrs, [specs[i] for i in o.inputs], specs[o.outputs[0]], constants)
    outputs = [b["out"]] + [n for n in b["next"] if n != b["out"]]
    return Graph(f"{op.name} step", ops, specs, b["seq"] + b["state"], outputs,
                 {k: weights[k] for k in b["invariant"] if k in weights})


def scan_counts(op: Op, tensors: dict[str, TensorSpec], constants: set[str] = frozenset()) -> OpCounts:
    """The scan's source counts: its step's, T times (what the loop asks for)."""
    step = body(op, tensors, {})
    total = sum((o.counts for o in step.ops), OpCounts())
    T = op.attrs["steps"]
    return OpCounts(*(v * T for v in (total.macs, total.other_ops, total.bytes_read, total.bytes_written)),
                    weight_bytes=sum(tensors[n].nbytes for n in bindings(op)["invariant"] if n in constants))


__all__ = ["body", "scan_counts"]
