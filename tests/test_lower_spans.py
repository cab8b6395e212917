"""Temporal spans: owned rows chosen up front, halos derived from every dependency."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dse.frontend import run_pipeline
from dse.plan.spans import Span, SpanError, halos, needed_rows, span_partition
from dse.workload.recipes import instantiate, load_recipe

PARAMS = dict(length=64, mels=16, channels=16, out_channels=16)


@pytest.fixture(scope="module")
def tconv():
    pipe = run_pipeline("temporal_conv", PARAMS)
    _, inputs = instantiate(load_recipe("temporal_conv"), **PARAMS)
    return pipe.graph, inputs


def test_span_partition_boundary_and_tail():
    assert span_partition(64, 4) == [Span(0, 16), Span(16, 32), Span(32, 48), Span(48, 64)]
    assert span_partition(10, 4) == [Span(0, 3), Span(3, 6), Span(6, 9), Span(9, 10)]
    assert span_partition(2, 4)[3] == Span(2, 2) and len(span_partition(2, 4)[3]) == 0


def test_halo_of_the_stack_is_the_sum_of_reaches(tconv):
    graph, _ = tconv
    out, x = graph.outputs[0], graph.inputs[0]
    # conv_in (k 3, d 1) + dilated (k 3, d 2, 4, 8) + 1x1: 1 + 2 + 4 + 8 = 15 rows a side
    spans = span_partition(64, 4)
    assert [halos(graph, out, s)[x] for s in spans] == [(0, 15), (15, 15), (15, 15), (15, 0)]
    # the residual adds keep the skip operand's rows too: the first dilated conv's input
    # needs the reach of the three later dilations (2 + 4 + 8)
    first = next(op for op in graph.ops if op.kind == "conv1d" and op.attrs["dilation"] == [2])
    assert halos(graph, out, Span(16, 32))[first.inputs[0]] == (14, 14)


def test_owned_rows_depend_on_exactly_the_needed_rows(tconv):
    """Rows outside a worker's needed span cannot change its owned outputs (bit for bit on
    the quantized graph); the row just inside each halo edge does."""
    graph, inputs = tconv
    out, x = graph.outputs[0], graph.inputs[0]
    base = graph.trace(*inputs)[out].numpy()
    owned = Span(16, 32)
    need = needed_rows(graph, out, owned)[x]
    rng = np.random.default_rng(0)
    xin = inputs[0].clone()
    outside = [t for t in range(64) if not need.lo <= t < need.hi]
    xin[..., outside] = torch.from_numpy(rng.normal(0, 5, (1, 16, len(outside))).astype(np.float32))
    got = graph.trace(xin)[out].numpy()
    assert np.array_equal(got[..., owned.lo:owned.hi].view(np.uint32), base[..., owned.lo:owned.hi].view(np.uint32))
    assert not np.array_equal(got, base)  # the other rows did change
    for edge in (need.lo, need.hi - 1):
        xe = inputs[0].clone()
        xe[..., edge] = 4.0
        changed = graph.trace(xe)[out].numpy()
        assert not np.array_equal(changed[..., owned.lo:owned.hi], base[..., owned.lo:owned.hi]), edge


def test_unknown_op_has_no_span_rule():
    pipe = run_pipeline("vit_block", dict(tokens=17, dim=32, heads=2, mlp_ratio=2))
    with pytest.raises(SpanError, match="no temporal span rule"):
        needed_rows(pipe.graph, pipe.graph.outputs[0], Span(0, 4))


def test_span_partitioned_stack_assembles_bit_identical_outputs():
    """Each worker runs the whole conv stack on its span plus halo (boundary spans padded
    only at the sequence edges, a short tail span), with no barrier between layers; the
    assembled output equals the unpartitioned quantized reference bit for bit, and every
    worker's intermediate rows equal the reference's rows."""
    import emulator
    from dse.chips import load_chip
    from dse.lower.spans import lower_spans
    from dse.mapping import Mapping

    params = dict(length=50, mels=16, channels=16, out_channels=16)
    pipe = run_pipeline("temporal_conv", params)
    graph = pipe.graph
    _, inputs = instantiate(load_recipe("temporal_conv"), **params)
    chip = load_chip("goban")
    staged, spans, parts, final = lower_spans(graph, chip, Mapping(), inputs, 4)
    assert spans == [Span(0, 13), Span(13, 26), Span(26, 39), Span(39, 50)]
    assert [sum(isinstance(i, emulator.Barrier) for i in c) for c in staged.program.cores] == [1, 1, 1, 1]
    res = emulator.run(staged.program, chip, staged.image)
    ref = graph.trace(*inputs)
    got = final.read(res.dram)
    assert np.array_equal(got.view(np.uint32), ref[graph.outputs[0]].numpy().view(np.uint32))
    for low, (sg, need, axes) in zip(staged.stages, parts):
        # owned rows only for the final op; convs on the Ball, padded at true edges only
        assert sg.tensors[graph.outputs[0]].shape[axes[graph.outputs[0]]] == len(need[graph.outputs[0]])
        assert all(o.how == "matrix" for o in low.ops if o.kind == "conv1d")
        for op in sg.ops:
            name = op.outputs[0]
            if name not in ref:
                continue
            want = ref[name].numpy().take(range(need[name].lo, need[name].hi), axis=axes[name])
            assert np.array_equal(low.read(res.dram, name).tobytes(), want.tobytes()), (sg.name, name)
