"""Stage partitioning on poly: prefill on the 3 prefill cores, decode on the 2 decode cores,
each built with its own group's hardware; the placement knob (#19) in the lowering and the
model, against the emulator."""

from __future__ import annotations

import numpy as np
import pytest

import emulator
from dse.analytical.placed import coupled_stages, epoch_cycles, estimate_placed, lockstep_cycles
from dse.chips import load_chip
from dse.frontend import run_pipeline
from dse.lower import Infeasible, lower_placed, lower_stages
from dse.mapping import Candidate, Mapping
from dse.numerics import compare
from dse.numerics.run import StageWork, emulate_placed
from dse.workload.recipes import instantiate, load_recipe

LLAMA = dict(vocab=64, dim=32, layers=1, heads=2, kv_heads=1)


def _stage(recipe, **params):
    pipe = run_pipeline(recipe, params)
    assert pipe.passed
    _, inputs = instantiate(load_recipe(recipe), **params)
    return pipe.graph, inputs


@pytest.fixture(scope="module")
def phases():
    return _stage("llama_prefill", seq=16, **LLAMA), _stage("llama_decode", past=15, **LLAMA)


def test_prefill_and_decode_on_their_own_core_groups_bit_exact(phases):
    pre, dec = phases
    chip = load_chip("poly")
    roles = [g.role for g in chip.cores.groups for _ in range(g.count)]
    prefill_cores = [c for c, r in enumerate(roles) if r == "prefill"]
    decode_cores = [c for c, r in enumerate(roles) if r == "decode"]
    assert prefill_cores == [0, 1, 2] and decode_cores == [3, 4]
    staged = lower_stages([(pre[0], pre[1], prefill_cores), (dec[0], dec[1], decode_cores)], chip,
                          Mapping(split="cols"))
    assert len(staged.program.cores) == 5
    # each stage's program is built with its group's parameters
    assert [low.candidate.chip.name for low in staged.stages] == ["poly.prefill", "poly.decode"]
    res = emulator.run(staged.program, chip, staged.image)
    for low, (graph, inputs) in zip(staged.stages, (pre, dec)):
        v = compare(graph, low, res.dram, graph.trace(*inputs))
        assert v.integer_bit_exact and v.outputs_bit_exact and v.first_differing_op is None
    # each stage's Ball work stays on its own cores
    busy = [res.counters.total("ball_busy_cycles", core=c, ball="matrix") for c in range(5)]
    assert all(b > 0 for b in busy)
    n_barriers = {sum(isinstance(i, emulator.Barrier) for i in c) for c in staged.program.cores}
    assert len(n_barriers) == 1
    # the decode cores' 12 banks bound their allocations
    assert max(res.counters.value("peak_allocated_bytes", core=c) for c in decode_cores) <= 12 * 16 * 1024


def test_the_model_follows_the_placement_within_the_knobs_tolerance(phases):
    """Phases at once on their groups (lock-step epochs) and one after another on five
    identical cores: the model within 3% of the emulator, both bit-exact."""
    (pg, px), (dg, dx) = phases
    stages = [StageWork("prefill", pg, px), StageWork("decode", dg, dx)]
    phase = Candidate(load_chip("poly"), Mapping(split="cols", placement="phase"))
    spmd = Candidate(load_chip("poly", {"cores.groups": []}), Mapping(split="cols", workers=5))
    totals, per_stage = estimate_placed([("prefill", pg), ("decode", dg)], [phase, spmd])
    assert totals["feasible"].all() and len(per_stage) == 2
    cycles = []
    for i, cand in enumerate((phase, spmd)):
        rep = emulate_placed(stages, cand)
        cycles.append(rep.cycles)
        assert rep.verdict.integer_bit_exact and rep.verdict.outputs_bit_exact and rep.verdict.passed
        model = totals.iloc[i]
        assert abs(model["latency_cycles"] / rep.cycles - 1) < 0.03
        dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
        assert abs(model["dma_bytes"] / dma - 1) < 0.03
        assert model["peak_sram_bytes"] == rep.peak_sram_bytes
    # on two tiles (3 + 2 cores) the phases meet at no barrier: the model takes the slower one
    split_tiles = Candidate(load_chip("poly", {"cores.tile_size": 3}), Mapping(split="cols", placement="phase"))
    rep = emulate_placed(stages, split_tiles)
    apart, _ = estimate_placed([("prefill", pg), ("decode", dg)], [split_tiles])
    assert rep.verdict.integer_bit_exact and rep.cycles < cycles[0]
    assert abs(apart.iloc[0]["latency_cycles"] / rep.cycles - 1) < 0.03
    # the SRAM each asks for: 3 x 16 + 2 x 12 banks against 5 x 16
    assert totals["private_sram_bytes"].tolist() == [(3 * 16 + 2 * 12) * 16384, 5 * 16 * 16384]


def test_a_stage_on_a_group_without_a_needed_ball_is_infeasible_with_that_reason(phases):
    (pg, px), (dg, dx) = phases
    poly = load_chip("poly")
    groups = [g.model_dump(mode="json") for g in poly.cores.groups]
    groups[1]["balls"] = ["fp2int", "int2fp"]
    cand = Candidate(load_chip("poly", {"cores.groups": groups}), Mapping(placement="phase"))
    totals, _ = estimate_placed([("prefill", pg), ("decode", dg)], [cand])
    reason = totals.iloc[0]["reason"]
    assert not totals.iloc[0]["feasible"] and reason.startswith("stage decode on cores 3-4 (poly.decode): op ")
    assert "no matrix Ball" in reason
    with pytest.raises(Infeasible) as exc:
        lower_placed([("prefill", pg, px), ("decode", dg, dx)], cand)
    assert str(exc.value) == reason
    # SPMD across groups whose hardware differs: the same words from the model and the lowering
    five = Candidate(poly, Mapping(workers=5))
    totals, _ = estimate_placed([("prefill", pg), ("decode", dg)], [five])
    with pytest.raises(Infeasible) as exc:
        lower_placed([("prefill", pg, px), ("decode", dg, dx)], five)
    assert str(exc.value) == totals.iloc[0]["reason"] and "span core groups prefill, decode" in str(exc.value)


def test_lock_step_epochs():
    assert coupled_stages([type("P", (), {"cores": (0, 1, 2)}), type("P", (), {"cores": (3, 4)})], 3) == [[0], [1]]
    assert coupled_stages([type("P", (), {"cores": (0, 1, 2)}), type("P", (), {"cores": (3, 4)})], 5) == [[0, 1]]
    # op 1: 10 cycles, 2 syncs; op 2: a view (no sync) joins op 3's epoch
    assert epoch_cycles(np.array([10, 3, 7]), np.array([2, 0, 1])).tolist() == [5.0, 5.0, 10.0]
    assert epoch_cycles(np.array([4, 6]), np.array([1, 0])).tolist() == [4.0, 6.0]
    # a shared weight's loads (2 of op 1's 10 cycles) are its first epoch, before their BARRIER;
    # its bytes split as its cycles; an op of one sync keeps its cycles whole
    lead, total = np.array([2, 0, 3]), np.array([10, 3, 7])
    assert epoch_cycles(np.array([10, 3, 7]), np.array([2, 0, 1]), lead, total).tolist() == [2.0, 8.0, 10.0]
    assert epoch_cycles(np.array([100, 0, 70]), np.array([3, 0, 1]), lead, total).tolist() == [20.0, 40.0, 40.0, 70.0]
    # stages meet at every barrier: the slowest epoch each time, the shorter stage padded
    assert lockstep_cycles([np.array([5.0, 1.0, 2.0]), np.array([1.0, 4.0])]) == 5 + 4 + 2
