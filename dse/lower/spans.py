"""Temporal span partitioning in the lowering: each worker runs the whole stack on its own
span plus halo (the spans and halos are the plan's: `dse.plan.spans`)."""

from __future__ import annotations

from ..plan.graph_plan import plan_graph
from ..workload.graph import Graph
from ..plan.spans import SpanError, span_graph, span_partition, time_axes


def lower_spans(graph: Graph, chip, mapping, inputs, workers: int, input_axis: int | None = None):
    """Temporal span partitioning: worker w owns output rows `span_partition(L, workers)[w]`
    (chosen before anything runs), runs the whole stack on its input span plus halo in
    its own buffers (no barrier between layers), and copies its owned rows into the shared
    output; one BARRIER ends the program. Returns (StagedLowered, spans, per-worker
    (graph, needed rows, axes), the assembled output's Loc)."""
    import torch

    from emulator import Barrier, CoreOp, DramTensor, Program, Region

    from ..mapping import Candidate
    from ..plan import Infeasible
    from ..plan.memory import Dram
    from .lower import Lowered, StagedLowered, ProgramBuilder

    if workers > chip.cores.count:
        raise Infeasible(f"{workers} workers but chip {chip.name} has {chip.cores.count} cores")
    if len(graph.outputs) != 1:
        raise SpanError("span partitioning needs a single-output graph")
    out = graph.outputs[0]
    axes = time_axes(graph, input_axis)
    if out not in axes:
        raise SpanError(f"output {out} of {graph.name} has no temporal axis (span partitioning needs a conv1d / "
                        f"elementwise stack over a 3-D input)")
    spec = graph.tensors[out]
    length = spec.shape[axes[out]]
    spans = span_partition(length, workers)
    dram = Dram()
    final = dram.tensor(spec.shape, spec.dtype)
    fview = final.view()
    cores, parts, lowered = [], [], []
    for w, span in enumerate(spans):
        if len(span) == 0:
            cores.append([Barrier()])
            parts.append(None)
            continue
        sg, need, sax = span_graph(graph, out, span, input_axis)
        xs = [torch.as_tensor(v).narrow(axes[n], need[n].lo, len(need[n]))
              for n, v in zip(graph.inputs, inputs) if n in need]
        b = ProgramBuilder(sg, Candidate(chip, mapping.model_copy(update={"workers": 1})), xs, dram)
        for plan in plan_graph(sg):
            b.lower_op(plan)
        src = b.logical(out).view()
        a = axes[out]
        shape = list(fview.shape)
        shape[a] = len(span)
        dst = DramTensor(fview.addr + span.lo * fview.strides[a], tuple(shape), fview.dtype, fview.strides)
        b.core(CoreOp("copy", dst, (src,)))
        cores.append(b.cores[0] + [Barrier()])
        parts.append((sg, need, sax))
        lowered.append(Lowered(sg, b.cand, None, None, b.locs, b.records))  # type: ignore[arg-type]
    img = dram.image()
    program = Program(cores, {"dram": Region(0, (img.size,), "uint8")}, {}, dram_bytes=img.size,
                      name=f"{graph.name} in {workers} temporal spans on {chip.name}")
    for low in lowered:
        low.program, low.image = program, img
    return StagedLowered(program, img, lowered, [[w] for w in range(workers) if parts[w]]), spans, parts, final


__all__ = ["lower_spans"]
