"""Attention's score chain fused (#19, mapping.fusion = fuse): between QK^T and PV the
dequantize, the 1/sqrt(D) scaling, the softmax and the quantize for PV are one core pass
over the accumulator's tiles (`dse.plan.chains`), not four passes with their intermediates
written to DRAM. Results stay bit for bit, the model follows the emulator, and the Int2Fp
stream the materialized dequantize took (its MVINs and MVOUTs) is gone."""

import pytest

from agreement import emulated_and_modelled
from dse.chips import load_chip
from dse.lower import lower
from dse.mapping import Candidate, Mapping
from dse.numerics.run import prepare_recipe
from dse.plan.chains import chain_parts, score_chains
from dse.plan.graph_plan import plan_graph

SMALL = {"past": 15, "vocab": 64, "dim": 64, "layers": 1, "heads": 4, "kv_heads": 2, "head_dim": 16, "ffn": 64}


@pytest.fixture(scope="module")
def decode():
    return prepare_recipe("llama_decode", SMALL)


def test_the_chain_between_the_two_products_is_found_and_planned_as_one_pass(decode):
    g = decode.graph
    chains = score_chains(g)
    assert {k: [op.kind for op in v] for k, v in chains.items()} == {
        "softmax_int8": ["dequantize", "mul", "softmax", "quantize"]}
    units = {p.op.name: p.unit for p in plan_graph(g, "fuse")}
    assert [units[n] for n in ("matmul", "mul_6", "softmax", "softmax_int8")] == ["fused"] * 3 + ["chain"]
    assert "chain" not in {p.unit for p in plan_graph(g)}  # materialize: as before
    # split as the materialized passes are: by the 2 KV heads' batch entries, all 2 rows each
    chain = chains["softmax_int8"]
    assert chain_parts(g, chain, 4) == [(0, 1, 0, 2), (1, 2, 0, 2)] and chain_parts(g, chain, 1) == [(0, 2, 0, 2)]


def test_fusing_the_chain_is_bit_exact_the_model_follows_and_the_stream_bytes_go(decode):
    chip = load_chip("goban")
    got = {}
    for workers in (1, 4):
        for fusion in ("materialize", "fuse"):
            cand = Candidate(chip, Mapping(workers=workers, fusion=fusion))
            rep, model, _ = emulated_and_modelled(decode, cand)
            dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
            assert model["dma_bytes"] == dma
            got[workers, fusion] = rep.cycles, model["latency_cycles"], dma, rep.peak_sram_bytes
    # materialized, the scores' dequantize is an Int2Fp stream on goban; fused, one core op
    how = {r.name: r.how for r in lower(decode.graph, Candidate(chip, Mapping()), decode.inputs).ops}
    assert how["matmul"] == "int2fp"
    # its stream moves the logical rows of the (2 kv heads, 2 query rows, 16 keys) scores: 2 x
    # 2 rows of 16 int32 in (Np = 16, one column tile), as many fp32 out
    stream_bytes = 2 * 2 * 16 * 4 + 2 * 2 * 16 * 4
    for workers in (1, 4):
        off, on = got[workers, "materialize"], got[workers, "fuse"]
        assert off[2] - on[2] == stream_bytes
        assert on[0] < off[0] and on[1] < off[1]
        assert on[3] == off[3]  # no bank is held across the chain


def test_a_chain_whose_probabilities_are_also_read_elsewhere_is_not_fused(decode):
    import copy

    from dse.workload.graph import Op, OpCounts

    g = copy.deepcopy(decode.graph)
    g.ops.append(Op("extra", "neg", ["softmax"], ["extra_out"], {}, "", OpCounts()))
    g.tensors["extra_out"] = type(g.tensors["softmax"])("extra_out", g.tensors["softmax"].shape, "float32")
    g.outputs = list(g.outputs) + ["extra_out"]
    assert score_chains(g) == {}


def test_grouped_query_attentions_chain_with_its_causal_mask_is_fused_bit_exact():
    # prefill, one KV head: its (2 query heads x 16 positions) rows regrouped (reshape), masked
    # (a weight), regrouped back; split across workers by rows
    prefill = prepare_recipe("llama_prefill", {"seq": 16, "vocab": 64, "dim": 32, "layers": 1, "heads": 2,
                                               "kv_heads": 1, "head_dim": 16, "ffn": 64})
    chains = score_chains(prefill.graph)
    assert [[op.kind for op in c] for c in chains.values()] == [
        ["dequantize", "mul", "reshape", "add", "reshape", "softmax", "quantize"]]
    chain = next(iter(chains.values()))
    assert chain_parts(prefill.graph, chain, 3) == [(0, 1, 0, 11), (0, 1, 11, 22), (0, 1, 22, 32)]
    chip = load_chip("goban")
    for workers in (1, 3):
        cand = Candidate(chip, Mapping(workers=workers, fusion="fuse"))
        emulated_and_modelled(prefill, cand)


def test_the_attention_fusion_spec_sweeps_and_the_model_prefers_fusing(tmp_path, repo):
    import json

    from dse.records import Store
    from dse.runner import run_sweep

    spec = (repo / "experiments" / "attention_fusion.toml").read_text()
    params = ", ".join(f"{k} = {v}" for k, v in SMALL.items())
    spec = spec.replace('recipe = "llama_decode"', f'recipe = "llama_decode"\nparams = {{ {params} }}')
    path = tmp_path / "attention_fusion.toml"
    path.write_text(spec.replace('emulator = "all"', 'emulator = "none"'))
    result = run_sweep(path, tmp_path / "r.db", progress=False)
    with Store(tmp_path / "r.db") as store:
        cands = store.candidates("attention_fusion")
        model = store.metric_table(result.experiment_id, "analytical").set_index("hash")
    by = {(m["workers"], m.get("fusion", "materialize")): h
          for h, m in zip(cands["hash"], map(json.loads, cands["mapping"]))}
    for w in (1, 4):
        assert model.loc[by[w, "fuse"], "latency_cycles"] < model.loc[by[w, "materialize"], "latency_cycles"]
        assert model.loc[by[w, "fuse"], "dma_bytes"] == model.loc[by[w, "materialize"], "dma_bytes"] - 512
