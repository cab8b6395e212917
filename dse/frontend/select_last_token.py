"""Prefill: only the last token's logits are used, so compute the tail of the model on
that one row.

Starting from the chosen output (`output`, default the first: the logits) the step walks
back through the ops that work token by token along `dim` (the sequence axis): linear
layers and matmuls by a weight, elementwise ops and activations, norms, softmaxes and
means over other axes. An op joins when everything that reads its result has joined too
and its result is no graph output, so nothing outside sees a changed shape. Where an
input of this region carries the sequence axis and comes from outside, one `slice` keeps
the last row. For a LLaMA-style prefill the region is the LM head, the final RMSNorm
(the row is selected before it) and everything of the last layer after attention.

The PyTorch reference of that output is sliced the same way for the check.
"""

from __future__ import annotations

from dse.frontend.rewrite import Rewriter, StepError
from dse.workload.graph import ACTIVATION_KINDS, BINARY_KINDS, UNARY_KINDS, Graph, Op

OPTIONS = {"output": (int, 0), "dim": (int, 1)}

_ELEMENTWISE = BINARY_KINDS + ACTIVATION_KINDS + UNARY_KINDS


def run(graph: Graph, ctx, output: int = 0, dim: int = 1) -> Graph:
    if not 0 <= output < len(graph.outputs):
        raise StepError(f"output {output}: the graph has {len(graph.outputs)} outputs")
    target = graph.outputs[output]
    target_shape = graph.tensors[target].shape
    if not 0 <= dim < len(target_shape) - 1:
        raise StepError(f"dim {dim}: output {target} {graph.tensors[target]} has no sequence axis there")
    rows = target_shape[dim]

    def token_axis(name: str, out_rank: int) -> int | None:
        """The input's axis aligned with `dim` of an output of rank out_rank, None if it broadcasts."""
        shape = graph.tensors[name].shape
        axis = dim - (out_rank - len(shape))
        return axis if axis >= 0 and shape[axis] == rows and rows != 1 else None

    def row_inputs(op: Op) -> list[str]:
        return list(op.inputs) if op.kind in _ELEMENTWISE else op.inputs[:1]

    def tokenwise(op: Op) -> bool:
        shape = graph.tensors[op.outputs[0]].shape
        rank = len(shape)
        if rank <= dim + 1 or shape[dim] != rows:
            return False
        first = graph.tensors[op.inputs[0]].shape
        if op.kind in _ELEMENTWISE:  # each input has the row axis or broadcasts along it
            for name in op.inputs:
                shape_in = graph.tensors[name].shape
                axis = dim - (rank - len(shape_in))
                if axis >= 0 and shape_in[axis] not in (rows, 1):
                    return False
            return True
        if len(first) != rank:
            return False
        if op.kind in ("mean", "sum"):
            return dim not in op.attrs["dims"]
        if op.kind == "softmax":
            return op.attrs["dim"] != dim
        if op.kind == "layer_norm":
            return rank - len(op.attrs["normalized_shape"]) > dim
        if op.kind == "linear":
            return op.inputs[1] in graph.weights
        if op.kind == "matmul":
            return op.inputs[1] in graph.weights and len(graph.tensors[op.inputs[1]].shape) == 2
        return False

    consumers = graph.consumers()
    outputs = set(graph.outputs)
    region: set[str] = set()
    for op in reversed(graph.ops):
        out = op.outputs[0]
        if out == target:
            joins = tokenwise(op)
        else:
            users = consumers.get(out, [])
            joins = (out not in outputs and bool(users) and all(u.name in region for u in users) and tokenwise(op))
        if joins:
            region.add(op.name)
    if not region:
        raise StepError(f"output {target} is not computed token by token along dim {dim}: nothing to select")

    rw = Rewriter(graph, "select_last_token")
    produced = {op.outputs[0] for op in graph.ops if op.name in region}
    sliced: dict[str, str] = {}
    for op in graph.ops:
        if op.name not in region:
            rw.keep(op)
            continue
        rank = len(graph.tensors[op.outputs[0]].shape)
        inputs = []
        for name in op.inputs:
            axis = token_axis(name, rank) if name in row_inputs(op) and name not in produced else None
            if axis is None:
                inputs.append(rw.get(name))
                continue
            if name not in sliced:
                spec = graph.tensors[name]
                shape = spec.shape[:axis] + (1,) + spec.shape[axis + 1:]
                sliced[name] = rw.emit("slice", [name], shape, spec.dtype,
                                       {"dim": axis, "start": rows - 1, "end": rows, "step": 1}, op.source,
                                       hint=f"{name}_last")
            inputs.append(sliced[name])
        rw.keep(op, inputs=inputs)
        shape = graph.tensors[op.outputs[0]].shape
        rw.set_spec(op.outputs[0], shape[:dim] + (1,) + shape[dim + 1:])

    ctx.map_expected(lambda outs: [o.narrow(dim, rows - 1, 1) if i == output else o for i, o in enumerate(outs)])
    result = rw.finish()
    ctx.details.update(ops_on_last_row=len(region), slices=len(sliced), rows=rows,
                       macs_before=graph.totals().macs, macs_after=result.totals().macs)
    return result
