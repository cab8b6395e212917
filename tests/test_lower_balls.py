"""Quantize / requantize / dequantize on the Fp2Int / Int2Fp Balls (bit-identical to the core
op and the PyTorch reference, with a fallback to the core on a chip without the Ball), the
cost choice between the two, and private SRAM from allocation lifetimes."""

from __future__ import annotations


import numpy as np
import pytest

import emulator
from emulator import CoreOp, Fp2Int, Int2Fp, Mset, Mvin, Mvout
from dse.chips import load_chip, override_chip
from dse.frontend import run_pipeline
from dse.lower import lower
from dse.cost import core_cycles, stream_cycles
from dse.lower.lower import sram_lifetimes
from dse.mapping import Candidate, Mapping
from dse.numerics import compare
from dse.workload.graph import Graph, Op, OpCounts, TensorSpec
from dse.workload.recipes import instantiate, load_recipe

TARGETS = [("toy", 1), ("pebble", 1), ("goban", 1), ("goban", 4)]


@pytest.fixture(scope="module")
def gemm_plus():
    """The gemm recipe (per-tensor quantize -> int8 matmul -> per-channel dequantize) plus
    per-tensor requantize and dequantize and a per-16-row-strip dequantize of the
    accumulator, and a per-tensor requantize of a row-major int32 tensor."""
    params = dict(m=40, n=48, k=40)
    pipe = run_pipeline("gemm", params)
    _, inputs = instantiate(load_recipe("gemm"), **params)
    g = pipe.graph
    tensors = dict(g.tensors)
    ops = list(g.ops)
    acc = "matmul_acc"
    M, N = tensors[acc].shape

    def add(name, kind, src, dtype, attrs):
        tensors[name] = TensorSpec(name, tensors[src].shape, dtype)
        ops.append(Op(name, kind, [src], [name], attrs, "test", OpCounts()))

    add("acc_q", "requantize", acc, "int8", {"scale": 0.013, "scale_axes": [], "scale_groups": []})
    add("acc_f", "dequantize", acc, "float32", {"scale": 0.00071, "scale_axes": [], "scale_groups": []})
    add("acc_rows", "dequantize", acc, "float32",
        {"scale": [0.001, 0.0021, 0.0033], "scale_axes": [0], "scale_groups": [16]})
    add("acc_rows_q", "requantize", acc, "int8",
        {"scale": [0.01, 0.02, 0.03], "scale_axes": [0], "scale_groups": [16]})
    add("acc_f_neg", "neg", "acc_f", "float32", {})  # a core op reads the Ball's fp32 output
    graph = Graph("gemm_plus", ops, tensors, list(g.inputs),
                  list(g.outputs) + ["acc_q", "acc_f", "acc_rows", "acc_rows_q", "acc_f_neg"], dict(g.weights))
    return graph, inputs, graph.trace(*inputs)


def _run(graph, inputs, chip, elementwise="ball", **mapping):
    low = lower(graph, Candidate(chip, Mapping(**mapping)), inputs, elementwise=elementwise)
    return low, emulator.run(low.program, chip, low.image)


def _without(chip, kind):
    balls = [b.model_dump(mode="json") for b in chip.balls if b.kind != kind]
    return override_chip(chip, {"balls": balls}, "test")


def _how(low):
    return {o.name: o.how for o in low.ops}


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}")


@pytest.mark.parametrize("chip_name,workers", TARGETS)
def test_scale_ops_on_their_balls_bit_identical_to_core_and_reference(gemm_plus, chip_name, workers):
    graph, inputs, ref = gemm_plus
    chip = load_chip(chip_name)
    results = {}
    for mode in ("ball", "core"):
        for policy in ("framework", "search"):
            low, res = _run(graph, inputs, chip, mode, policy=policy, workers=workers, split="cols")
            v = compare(graph, low, res.dram, ref)
            assert v.integer_bit_exact and v.first_differing_op is None, (mode, policy, v.first_differing_op)
            outs = {n: low.read(res.dram, n) for n in graph.outputs}
            for n in graph.outputs:  # float outputs too: bit for bit
                assert np.array_equal(_bits(outs[n]), _bits(ref[n].numpy())), (mode, policy, n)
            results[(mode, policy)] = (low, res, outs)
    for policy in ("framework", "search"):
        low, res, _ = results[("ball", policy)]
        how = _how(low)
        assert how["x_int8"] == "fp2int"  # per-tensor quantize fp32 -> int8
        assert how["acc_q"] == how["acc_f"] == how["acc_rows"] == how["acc_rows_q"] == "int2fp"
        assert how["matmul"] == "epilogue"  # per-channel dequantize: on the core (see _scale_plan)
        ins = [i for c in low.program.cores for i in c]
        assert any(isinstance(i, Fp2Int) and i.out_bits == 8 for i in ins)
        assert any(isinstance(i, Int2Fp) and (i.in_bits, i.out_bits) == (32, 8) for i in ins)
        assert any(isinstance(i, Int2Fp) and (i.in_bits, i.out_bits) == (32, 32) for i in ins)
        # per-strip: one scale per instruction, three strips of 16 rows -> three scales
        assert {i.scale for i in ins if isinstance(i, Int2Fp) and i.out_bits == 8} >= \
            {np.float32(s).item() for s in (0.01, 0.02, 0.03)}
        ball = "fp2int"
        assert res.counters.total("ball_ops", ball=ball) > 0
        # the padding of the Ball's outputs stays zero (the next matmul reads padded buffers)
        from emulator.coreops import dram_view
        for name in ("acc_q", "acc_f", "x_int8"):
            loc = low.locs[name]
            buf = dram_view(res.dram, emulator.DramTensor(loc.addr, loc.buffer_shape,
                                                          {"float32": "fp32"}.get(loc.dtype, loc.dtype)))
            mask = np.ones(buf.shape, dtype=bool)
            mask[tuple(slice(0, n) for n in loc.shape)] = False
            assert not buf[mask].any(), name
        core_low = results[("core", policy)][0]
        assert not any(isinstance(i, (Fp2Int, Int2Fp)) for c in core_low.program.cores for i in c)


def test_blocked_accumulator_with_column_tiles_scatters_rows(gemm_plus):
    """search on goban with 4 workers picks 16-column tiles (Nt = 3): each tile's rows go
    out by a strided MVOUT from a destination bank one tile row wide (col 4 for fp32, 1 for
    int8), stride one output row; M = 40: the bias-filled padding rows 40..47 of the last
    row tile are never moved."""
    graph, inputs, ref = gemm_plus
    chip = load_chip("goban")
    low, res = _run(graph, inputs, chip, policy="search", workers=4, split="cols")
    tm, tn, _ = next(o.tile for o in low.ops if o.how == "matrix")
    assert tn == 16
    ins = [i for c in low.program.cores for i in c]
    strided = [i for i in ins if isinstance(i, Mvout) and i.stride]
    assert strided and {i.stride for i in strided} == {48 * 4, 48}
    assert {i.col for i in ins if isinstance(i, Mset) and i.alloc and i.bank == 1} >= {4, 1}
    # the last row tile holds rows 32..39 only: 8 rows of 16 int32 = 32 lines in
    assert {i.iter for i in ins if isinstance(i, Int2Fp)} >= {tm * tn // 4, 8 * 16 // 4}
    for n in ("acc_rows", "acc_rows_q", "acc_f", "acc_q"):
        assert np.array_equal(_bits(low.read(res.dram, n)), _bits(ref[n].numpy())), n


def test_falls_back_to_the_core_without_the_ball(gemm_plus):
    graph, inputs, ref = gemm_plus
    for name in ("toy", "goban"):
        chip = load_chip(name)
        no_fp2int = _without(chip, "fp2int")
        low, res = _run(graph, inputs, no_fp2int)
        how = _how(low)
        assert how["x_int8"] == "core" and how["acc_q"] == "int2fp"
        assert not any(isinstance(i, Fp2Int) for i in low.program.cores[0])
        assert compare(graph, low, res.dram, ref).integer_bit_exact
        no_int2fp = _without(chip, "int2fp")
        low, res = _run(graph, inputs, no_int2fp)
        how = _how(low)
        assert how["x_int8"] == "fp2int" and how["acc_q"] == how["acc_f"] == "epilogue"
        assert not any(isinstance(i, Int2Fp) for i in low.program.cores[0])
        v = compare(graph, low, res.dram, ref)
        assert v.integer_bit_exact and v.first_differing_op is None


def test_auto_takes_the_cheaper_of_ball_and_core(gemm_plus):
    """toy (1024-byte bursts): streaming through the Ball is cheaper than the core's 4 cycles
    an element; goban (64-byte bursts, 100 cycles each, one in flight) is not."""
    graph, inputs, _ = gemm_plus
    toy, goban = load_chip("toy"), load_chip("goban")
    low, _ = _run(graph, inputs, toy, "auto")
    assert _how(low)["x_int8"] == "fp2int"
    low, _ = _run(graph, inputs, goban, "auto")
    assert _how(low)["x_int8"] == "core"
    # the estimate itself, by hand: the 40 x 40 fp32 input in a (48, 48) padded buffer =
    # 9216 bytes = 576 lines in, 144 out
    assert toy.dma_cycles(576) == 9 * 100 + 576 and toy.dma_cycles(144) == 3 * 100 + 144
    assert goban.dma_cycles(576) == 144 * 100 + 576
    assert goban.dma_cycles(16, col=4, strided=True) == 4 * 100 + 16  # 4 rows of 64 B, one burst each
    from dse.plan import Stream, StreamPiece
    s = Stream("fp2int", 32, 8, 1, 1, [StreamPiece(0, 576, 0, 144, 0, 1.0)])
    assert stream_cycles(toy, s) == 4 + (900 + 576) + 576 + (300 + 144)
    assert core_cycles(toy, CoreOp("scale", emulator.DramTensor(0, (40, 40), "int8"),
                                   (emulator.DramTensor(0, (40, 40), "fp32"),))) == 1600 * 4


def test_peak_sram_from_allocation_lifetimes(gemm_plus):
    # hand-made: col 1 + col 4 live together (5 banks), then col 4 + col 2 (6 banks)
    chip = load_chip("toy")
    prog = [Mset(0, 1), Mset(1, 4), Mset(0, alloc=False), Mset(2, 2), Mvin(2, 0, 1), Mset(1, alloc=False),
            Mset(2, alloc=False), Mset(3, 1)]
    peaks, lives = sram_lifetimes([prog], chip)
    bank = 1024 * 16
    assert peaks == [6 * bank]
    assert lives[0] == [(0, bank, 0, 2), (1, 4 * bank, 1, 5), (2, 2 * bank, 3, 6), (3, bank, 7, 8)]
    # a lowered graph: single-buffered tiles of <= 1024 A and B lines (col 1 each) and a C of
    # <= 1024 accumulator rows (col 4): 6 banks while the matmul runs; the quantize stream's 2
    # banks are freed before it starts
    graph, inputs, _ = gemm_plus
    low, res = _run(graph, inputs, chip, policy="search", double_buffer=False)
    tm, tn, tk = next(o.tile for o in low.ops if o.how == "matrix")
    assert tm * tk <= 1024 * 16 and tn * tk <= 1024 * 16 and tm * tn * 4 <= 1024 * 64
    assert low.peak_sram_bytes == 6 * bank == res.counters.value("peak_allocated_bytes", core=0)
    _, lives = sram_lifetimes(low.program.cores, chip)
    assert lives[0][0][1] == bank and lives[0][1][1] == bank and lives[0][0][3] < lives[0][2][2]
    low, res = _run(graph, inputs, load_chip("goban"), workers=4, split="cols")
    assert low.peak_sram_per_worker == [res.counters.value("peak_allocated_bytes", core=c) for c in range(4)]


@pytest.mark.parametrize("recipe", ["vit_block", "llama_decode", "temporal_conv", "lenet5"])
def test_recipes_bit_exact_with_every_eligible_scale_op_forced_on_the_balls(recipe):
    """elementwise="ball": every per-tensor / per-row quantize, requantize, dequantize on the
    Balls (goban too, where "auto" keeps them on the core); the integer path still equals
    the quantized reference bit for bit, and so does every float tensor the Balls write."""
    from test_numerics import SMALL
    params = SMALL[recipe]
    pipe = run_pipeline(recipe, params)
    _, inputs = instantiate(load_recipe(recipe), **params)
    graph = pipe.graph
    ref = graph.trace(*inputs)
    for chip_name, workers in (("toy", 1), ("goban", 4)):
        chip = load_chip(chip_name)
        low, res = _run(graph, inputs, chip, "ball", workers=workers, split="cols")
        v = compare(graph, low, res.dram, ref)
        assert v.integer_bit_exact and v.first_differing_op is None, (chip_name, v.first_differing_op)
        on_balls = [o for o in low.ops if o.how in ("fp2int", "int2fp")]
        assert on_balls
        for o in on_balls:
            name = next(op.outputs[0] for op in graph.ops if op.name == o.name)
            assert np.array_equal(_bits(low.read(res.dram, name)), _bits(ref[name].numpy())), name
        assert low.peak_sram_bytes == max(res.counters.value("peak_allocated_bytes", core=c) for c in range(workers))


@pytest.mark.parametrize("chip_name", ["toy", "goban"])
def test_stream_cycles_is_the_emulators_serial_cost(gemm_plus, chip_name):
    """The cost the lowering compares (and the analytical model mirrors) is exactly the
    emulator's serial time of the emitted stream: MSETs, per piece MVIN + Ball + MVOUT
    (contiguous and strided transfers)."""
    from dse.plan import Stream, StreamPiece
    graph, inputs, _ = gemm_plus
    chip = load_chip(chip_name)
    checked = set()
    for policy, workers in (("search", 1), ("search", 4), ("framework", 1)):
        if workers > chip.cores.count:
            continue
        low = lower(graph, Candidate(chip, Mapping(policy=policy, workers=workers, split="cols")), inputs,
                    elementwise="ball")
        for w, prog in enumerate(low.program.cores):
            # cut the worker's program into its streams: MSET(0) ... MSET(1, free)
            i = 0
            while i < len(prog):
                ins = prog[i]
                if not (isinstance(ins, Mset) and ins.alloc and ins.bank == 0 and isinstance(prog[i + 2], Mvin)
                        and isinstance(prog[i + 3], (Fp2Int, Int2Fp))):
                    i += 1
                    continue
                j = i + 2
                while not (isinstance(prog[j], Mset) and not prog[j].alloc):
                    j += 1
                body = [x for x in prog[i:j + 2] if not isinstance(x, emulator.Fence)]
                ball = next(x for x in body if isinstance(x, (Fp2Int, Int2Fp)))
                pieces = [StreamPiece(a.addr, a.iter, c.addr, c.iter, c.stride, b.scale)
                          for a, b, c in zip(body[2::3], body[3::3], body[4::3])]
                s = Stream("fp2int" if isinstance(ball, Fp2Int) else "int2fp", 32, 8, body[0].col, body[1].col,
                           pieces)
                sub = emulator.Program([body], dict(low.program.inputs), {}, dram_bytes=low.image.size)
                res = emulator.run(sub, chip, low.image, mode="serial")
                assert res.cycles == stream_cycles(chip, s), (policy, workers, w, i)
                checked.add(any(p.dst_stride for p in pieces))
                i = j + 2
    assert checked == ({False, True} if chip_name == "goban" else {False})  # goban x 4: 16-column tiles
