"""Temporal span partitioning in the lowering: each worker runs the whole stack on its own
span plus halo (the spans and halos are the plan's: `dse.plan.spans`)."""

from __future__ import annotations

import torch

from emulator import Barrier, CoreOp, DramTensor, Mvin, Program, Region

from ..mapping import Candidate
from ..mapping.matmul import PAD
from ..plan import Infeasible
from ..plan.graph_plan import plan_graph
from ..plan.memory import Dram
from ..plan.placement import spmd_chip
from ..plan.spans import SpanError, shared_stack, span_graph, span_partition, time_axes
from ..workload.graph import Graph
from .lower import Lowered, StagedLowered, ProgramBuilder, blocked_bt, weight_bt


def lower_spans(graph: Graph, chip, mapping, inputs, workers: int, input_axis: int | None = None):
    """Temporal span partitioning: worker w owns output rows `span_partition(L, workers)[w]`
    (chosen before anything runs), runs the whole stack on its input span plus halo in
    its own buffers (no barrier between layers), and copies its owned rows into the shared
    output; one BARRIER ends the program.

    With ``mapping.weights = "shared"`` every matrix op's weight is loaded, once per tile of
    cores, into its shared memory (`dse.plan.spans.shared_stack`: each weight's B tiles in
    banks of its own, counted up from the first shared bank; a wave's tiles dealt to the
    workers as `shared_loads` deals one weight's): the first wave before the spans, then one
    BARRIER; each later wave after a BARRIER before the op it begins (`SharedStack.starts`),
    then one more; every span's matrix Ball reads B there. Returns (StagedLowered, spans,
    per-worker (graph, needed rows, axes), the assembled output's Loc)."""
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
    parts = [span_graph(graph, out, span, input_axis) if len(span) else None for span in spans]
    one = mapping.model_copy(update={"workers": 1})
    stack = None
    preload: list[list] = [[] for _ in spans]
    waves: list[list[list]] = []  # per later wave, per worker: BARRIER, its loads, BARRIER
    if mapping.weights == "shared":
        span_chip = spmd_chip(chip, 1)[0]  # the chip a span is built for (`ProgramBuilder`)
        stack = shared_stack([part[0] for part in parts if part], span_chip, one)
        if stack.reason:
            raise Infeasible(stack.reason)
        shared_mem = span_chip.shared_memory
        ops = {op.name: op for op in graph.ops}
        active = sum(1 for part in parts if part)  # a prefix: the trailing spans are the empty ones
        for wave_index, wave in enumerate(stack.waves):
            tiles = []  # DRAM address and bytes of every B tile of the wave, by shared bank
            for weight in wave:
                weight_t = weight_bt(graph, ops[weight.op])
                Np, Kp = (-(-dim // PAD) * PAD for dim in weight_t.shape[1:])
                base = dram.blob(blocked_bt(weight_t, Np, Kp, *weight.tile))
                tiles += [(base + tile * weight.tile_bytes, weight.tile_bytes) for tile in range(weight.tiles)]
            first = shared_mem.first_bank_id
            loads = [[Mvin(first + bank, tiles[bank][0], tiles[bank][1] // 16, 0) for bank in banks]
                     for banks in stack.loads(active, chip.cores.tile_size, wave_index)]
            loads += [[] for _ in range(active, len(spans))]
            if wave_index == 0:
                preload = [mine + [Barrier()] for mine in loads]
            else:
                waves.append([[Barrier(), *mine, Barrier()] for mine in loads])
    cores, lowered = [], []
    for worker, (span, part) in enumerate(zip(spans, parts)):
        if part is None:
            cores.append(preload[worker] + [ins for wave in waves for ins in wave[worker]] + [Barrier()])
            continue
        worker_graph, need, _ = part
        span_inputs = [torch.as_tensor(value).narrow(axes[name], need[name].lo, len(need[name]))
                       for name, value in zip(graph.inputs, inputs) if name in need]
        builder = ProgramBuilder(worker_graph, Candidate(chip, one), span_inputs, dram)
        builder.shared_stack = stack
        starts = stack.starts if stack is not None else {}
        for plan in plan_graph(worker_graph):
            if plan.op.name in starts:  # every span past the earlier waves' readers: the next wave's loads
                builder.cores[0] += waves[starts[plan.op.name] - 1][worker]
            builder.lower_op(plan)
        src = builder.logical(out).view()
        axis = axes[out]
        shape = list(fview.shape)
        shape[axis] = len(span)
        dst = DramTensor(fview.addr + span.lo * fview.strides[axis], tuple(shape), fview.dtype, fview.strides)
        builder.core(CoreOp("copy", dst, (src,)))
        cores.append(preload[worker] + builder.cores[0] + [Barrier()])
        labels = {ins: f"span {worker}: {label}" for ins, label in builder.labels.items()}
        lowered.append(Lowered(worker_graph, builder.cand, None, None, builder.locs,  # type: ignore[arg-type]
                               builder.records, labels=labels, named=dram.named))
    img = dram.image()
    how = " reading one shared copy of the weights" if stack is not None else ""
    program = Program(cores, {"dram": Region(0, (img.size,), "uint8")}, {}, dram_bytes=img.size,
                      name=f"{graph.name} in {workers} temporal spans on {chip.name}{how}")
    for low in lowered:
        low.program, low.image = program, img
    core_ids = [[worker] for worker in range(workers) if parts[worker]]
    return StagedLowered(program, img, lowered, core_ids), spans, parts, final


__all__ = ["lower_spans"]
