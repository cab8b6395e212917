"""Lowering: int8 products on the matrix Ball, tiles from the shared mapper, workers."""

from __future__ import annotations

import numpy as np
import pytest

import emulator
from emulator import Barrier, CoreOp, Fence, Matmul, Mvout
from dse.plan import plan_matmul
from dse.chips import load_chip
from dse.frontend import run_pipeline
from dse.lower import Infeasible, lower
from dse.mapping import Candidate, Mapping, MatmulShape
from dse.numerics import compare, emulate_graph


@pytest.fixture(scope="module")
def gemm():
    pipe = run_pipeline("gemm", dict(m=32, n=48, k=40))
    assert pipe.passed
    from dse.workload.recipes import instantiate, load_recipe
    _, inputs = instantiate(load_recipe("gemm"), m=32, n=48, k=40)
    return pipe.graph, inputs


@pytest.fixture(scope="module")
def mlp():
    pipe = run_pipeline("mlp", dict(batch=8))
    from dse.workload.recipes import instantiate, load_recipe
    _, inputs = instantiate(load_recipe("mlp"), batch=8)
    return pipe.graph, inputs


def _run(graph, inputs, chip, **mapping):
    cand = Candidate(chip, Mapping(**mapping))
    low = lower(graph, cand, inputs)
    res = emulator.run(low.program, chip, low.image)
    return low, res


def test_gemm_bit_exact_with_mapper_tiles_and_hand_counted_ball_cycles(gemm):
    graph, inputs = gemm
    chip = load_chip("toy")
    ref = graph.trace(*inputs)
    for policy in ("framework", "search"):
        low, res = _run(graph, inputs, chip, policy=policy)
        acc = low.read(res.dram, "matmul_acc")
        assert acc.dtype == np.int32
        assert np.array_equal(acc, ref["matmul_acc"].numpy())
        assert np.array_equal(low.read(res.dram, "matmul").view(np.uint32), ref["matmul"].numpy().view(np.uint32))
        rec = next(o for o in low.ops if o.how == "matrix")
        plan = plan_matmul(chip, Mapping(policy=policy), MatmulShape(32, 48, 40))
        assert rec.tile == (plan.tm, plan.tn, plan.tk)
    # search on toy: the mapper's tile (tm, tn, tk) over the padded 32 x 48 x 48 problem;
    # each of the Mt*Nt*Kt MATMULs costs tm*tn*tk/16 + tm*tn cycles (WS formula)
    low, res = _run(graph, inputs, chip, policy="search")
    tm, tn, tk = next(o for o in low.ops if o.how == "matrix").tile
    steps = (32 // tm) * (48 // tn) * (48 // tk)
    assert res.counters.total("ball_busy_cycles", core=0, ball="matrix") == steps * (tm * tn * tk // 16 + tm * tn)
    assert sum(isinstance(i, Matmul) for i in low.program.cores[0]) == steps


def test_framework_fences_every_mvout_search_does_not(gemm):
    graph, inputs = gemm
    chip = load_chip("toy")
    for policy, fenced in (("framework", True), ("search", False)):
        low, _ = _run(graph, inputs, chip, policy=policy)
        prog = low.program.cores[0]
        after = [type(prog[i + 1]) is Fence for i, ins in enumerate(prog) if isinstance(ins, Mvout)]
        assert after and all(after) == fenced
        if not fenced:
            assert not any(after[:-1])


@pytest.mark.parametrize("policy,split", [("framework", "rows"), ("framework", "cols"), ("search", "cols")])
def test_workers_identical_submitted_work_and_same_bits(mlp, policy, split):
    graph, inputs = mlp
    chip = load_chip("goban")
    out = {}
    for w in (1, 4):
        low, res = _run(graph, inputs, chip, policy=policy, workers=w, split=split)
        assert len(low.program.cores) == w
        if w > 1:
            n = [sum(isinstance(i, Barrier) for i in c) for c in low.program.cores]
            assert len(set(n)) == 1 and n[0] > 0
        matmuls = sum(isinstance(i, Matmul) for c in low.program.cores for i in c)
        macs = sum(i.M * i.N * i.K for c in low.program.cores for i in c if isinstance(i, Matmul))
        core_elems = sum(i.element_count() for c in low.program.cores for i in c if isinstance(i, CoreOp))
        out[w] = (matmuls, macs, core_elems, low.read(res.dram, graph.outputs[0]).tobytes(), res.cycles)
    # the same padded MACs on the Ball, split, and the same bits
    assert out[1][1] == out[4][1] and out[1][3] == out[4][3]
    if policy == "framework":  # the same tiles whatever the worker count: identical submitted work
        assert out[1][:3] == out[4][:3]
    # (search may pick other tiles for 4 workers, hence other packing work on the core)
    if split == "cols":  # M = 8: one row block, so only a column split spreads the work
        assert out[4][4] < out[1][4]


def test_bias_preloaded_and_padding_kept_zero(mlp):
    graph, inputs = mlp
    chip = load_chip("pebble")
    low, res = _run(graph, inputs, chip)
    ref = graph.trace(*inputs)
    for name in ("linear_acc", "linear_requant", "relu_int8", "linear_1_acc", "linear_2_acc", "linear_2"):
        got, want = low.read(res.dram, name), ref[name].numpy()
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), name
    loc = low.locs["relu_int8"]  # an int8 activation buffer: rows 8..15 are padding, still zero
    from emulator.coreops import dram_view
    from emulator import DramTensor
    buf = dram_view(res.dram, DramTensor(loc.addr, loc.buffer_shape, "int8"))
    assert loc.buffer_shape == (16, 1024) and not buf[8:].any()


def test_infeasible_gives_the_analytical_reason(gemm):
    graph, inputs = gemm
    chip = load_chip("toy", {"banks.count": 4})
    plan = plan_matmul(chip, Mapping(), MatmulShape(32, 48, 40))
    assert not plan.feasible
    with pytest.raises(Infeasible) as err:
        lower(graph, Candidate(chip, Mapping()), inputs)
    assert plan.reason in str(err.value) and "bank budget" in str(err.value)
    rep = emulate_graph(graph, Candidate(chip, Mapping()), inputs)
    assert not rep.feasible and plan.reason in rep.reason


def test_too_many_workers_is_infeasible(gemm):
    graph, inputs = gemm
    with pytest.raises(Infeasible, match="2 workers but chip toy has 1 cores"):
        lower(graph, Candidate(load_chip("toy"), Mapping(workers=2)), inputs)


def test_first_differing_op_is_named(mlp):
    graph, inputs = mlp
    chip = load_chip("toy")
    low, res = _run(graph, inputs, chip)
    ref = graph.trace(*inputs)
    v = compare(graph, low, res.dram, ref)
    assert v.integer_bit_exact and v.first_differing_op is None and v.integer_tensors == 8
    img = res.dram.copy()
    loc = low.locs["relu_int8"]
    img[loc.addr] ^= 1  # corrupt one element of the second layer's input, after the fact
    v = compare(graph, low, img, ref)
    assert not v.integer_bit_exact and v.first_differing_op == "relu_int8" or \
        v.first_differing_op == graph.producers()["relu_int8"].name


def test_convolutions_by_im2col_on_the_matrix_ball_split_across_workers():
    """temporal_conv: dilated, padded conv1d stack (NLC, WIO after permute) -> im2col gather
    (a charged core copy, split by output rows) + GEMM on the matrix Ball; bit-exact."""
    params = dict(length=32, mels=16, channels=16, out_channels=16)
    pipe = run_pipeline("temporal_conv", params)
    from dse.workload.recipes import instantiate, load_recipe
    _, inputs = instantiate(load_recipe("temporal_conv"), **params)
    graph = pipe.graph
    ref = graph.trace(*inputs)
    chip = load_chip("goban")
    bits = {}
    for w in (1, 4):
        low, res = _run(graph, inputs, chip, workers=w)
        convs = [o for o in low.ops if o.kind == "conv1d"]
        assert len(convs) == 5 and all(o.how == "matrix" for o in convs)
        # conv1d_1: 32 positions x (3 taps x 16 channels) = M 32, K 48, N 16
        assert next(o for o in convs if o.name == "conv1d_1_acc").tile[0] in (16, 32)
        for op in graph.ops:
            name = op.outputs[0]
            got, want = low.read(res.dram, name), ref[name].numpy()
            assert got.dtype == want.dtype and np.array_equal(got.tobytes(), want.tobytes()), name
        copies = [sum(isinstance(i, CoreOp) and i.kind == "copy" for i in c) for c in low.program.cores]
        assert all(n > 0 for n in copies)  # every worker gathers its own rows
        bits[w] = (low.read(res.dram, graph.outputs[0]).tobytes(), res.cycles)
    assert bits[1][0] == bits[4][0] and bits[4][1] < bits[1][1]


def test_int8_relu_on_the_relu_ball(mlp):
    graph, inputs = mlp
    chip = load_chip("pebble")
    low, res = _run(graph, inputs, chip)
    relus = [o for o in low.ops if o.kind == "relu"]
    assert [o.how for o in relus] == ["relu", "relu"]
    # each relu streams its padded 16 x 1024 int8 buffer: 1024 lines, latency `iter` -> 1024 cycles
    assert res.counters.total("ball_busy_cycles", core=0, ball="relu") == 2 * 1024
    ref = graph.trace(*inputs)
    assert np.array_equal(low.read(res.dram, "relu_1_int8"), ref["relu_1_int8"].numpy())
    low, _ = _run(graph, inputs, load_chip("goban"))  # goban has no ReLU Ball: a core op
    assert [o.how for o in low.ops if o.kind == "relu"] == ["core", "core"]
