"""Stage partitioning on poly: prefill on the 3 prefill cores, decode on the 2 decode cores."""

from __future__ import annotations


import emulator
from dse.chips import load_chip
from dse.frontend import run_pipeline
from dse.lower import lower_stages
from dse.mapping import Mapping
from dse.numerics import compare
from dse.workload.recipes import instantiate, load_recipe

LLAMA = dict(vocab=64, dim=32, layers=1, heads=2, kv_heads=1)


def _stage(recipe, **params):
    pipe = run_pipeline(recipe, params)
    assert pipe.passed
    _, inputs = instantiate(load_recipe(recipe), **params)
    return pipe.graph, inputs


def test_prefill_and_decode_on_their_own_core_groups_bit_exact():
    chip = load_chip("poly")
    roles = [g.role for g in chip.cores.groups for _ in range(g.count)]
    prefill_cores = [c for c, r in enumerate(roles) if r == "prefill"]
    decode_cores = [c for c, r in enumerate(roles) if r == "decode"]
    assert prefill_cores == [0, 1, 2] and decode_cores == [3, 4]
    pre = _stage("llama_prefill", seq=16, **LLAMA)
    dec = _stage("llama_decode", past=15, **LLAMA)
    staged = lower_stages([(pre[0], pre[1], prefill_cores), (dec[0], dec[1], decode_cores)], chip,
                          Mapping(split="cols"))
    assert len(staged.program.cores) == 5
    res = emulator.run(staged.program, chip, staged.image)
    for low, (graph, inputs) in zip(staged.stages, (pre, dec)):
        v = compare(graph, low, res.dram, graph.trace(*inputs))
        assert v.integer_bit_exact and v.outputs_bit_exact and v.first_differing_op is None
    # each stage's Ball work stays on its own cores
    busy = [res.counters.total("ball_busy_cycles", core=c, ball="matrix") for c in range(5)]
    assert all(b > 0 for b in busy)
    n_barriers = {sum(isinstance(i, emulator.Barrier) for i in c) for c in staged.program.cores}
    assert len(n_barriers) == 1
