"""Mixture-of-experts (issue #34): transformers' MoE decoders (tiny configs, random weights,
nothing downloaded) captured with the router's top-k on the core and each expert's matmuls
on the matrix Ball over the tokens the example inputs route to it (`dse.workload.moe`);
`recipe check` passes, emulation on goban with 1 and 4 workers is bit-exact on the integer
path and the model within 2% of the emulator; the recorded routing is PyTorch's own."""

from __future__ import annotations

import pytest
import torch

from dse.workload.libraries import prepare_torchvision
from dse.workload.moe import moe_layers
from test_real_models import MODELS, check_and_emulate, make_recipe

prepare_torchvision()  # transformers' model classes import torchvision
transformers = pytest.importorskip("transformers")

MOE = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
           vocab_size=64, max_position_embeddings=16, use_cache=False, num_experts_per_tok=2)
MOE_MODELS = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(MOE, intermediate_size=64, num_local_experts=4)),
    # a shared expert beside the routed ones, its output gated by a sigmoid
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(MOE, intermediate_size=64, moe_intermediate_size=32,
                                                               shared_expert_intermediate_size=64, num_experts=4)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(MOE, intermediate_size=32, num_experts=4, eos_token_id=0,
                                                     pad_token_id=1)),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(MOE, intermediate_size=64, moe_intermediate_size=32,
                                                               num_experts=4, head_dim=8)),
    "granitemoe": ("GraniteMoeConfig", "GraniteMoeForCausalLM", dict(MOE, intermediate_size=32, num_local_experts=4)),
    "ernie4_5_moe": ("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM", dict(MOE, intermediate_size=64,
                                                                          moe_intermediate_size=32, moe_num_experts=4,
                                                                          moe_k=2, moe_layer_start_index=0)),
    # lightning attention's layers left out: one full-attention layer and its experts
    "minimax": ("MiniMaxConfig", "MiniMaxForCausalLM", dict(MOE, intermediate_size=32, num_local_experts=4,
                                                           layer_types=["full_attention"], head_dim=8)),
    "hunyuan_v1_moe": ("HunYuanMoEV1Config", "HunYuanMoEV1ForCausalLM", dict(MOE, intermediate_size=32, num_experts=4,
                                                                            moe_topk=2, head_dim=8)),
    # its quantized router sends expert 1's one token elsewhere: the stage follows its own
    # routing (`dse.workload.moe.follow_routing`), expert 1 gets no ops
    "flex_olmo": ("FlexOlmoConfig", "FlexOlmoForCausalLM", dict(MOE, intermediate_size=32, num_experts=4,
                                                               pad_token_id=1, eos_token_id=0)),
    # group-limited routing (DeepSeek's): a group mask scattered from the groups' top-k,
    # inverted (bitwise_not of a bool cast) and filled in; a shared expert beside
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(MOE, intermediate_size=64, moe_intermediate_size=32,
                                                            n_routed_experts=4, n_shared_experts=1, n_group=2,
                                                            topk_group=1, first_k_dense_replace=0, head_dim=8)),
    "dots1": ("Dots1Config", "Dots1ForCausalLM", dict(MOE, intermediate_size=64, moe_intermediate_size=32,
                                                     n_routed_experts=4, n_shared_experts=1, n_group=1, topk_group=1,
                                                     first_k_dense_replace=0, head_dim=8)),
}
MODELS.update(MOE_MODELS)


def torch_routing(name: str, inputs) -> list[int]:
    """Tokens per expert as the model's own router picks them (its top-k indices, hooked)."""
    config, model, kwargs = MOE_MODELS[name]
    torch.manual_seed(0)  # the recipe's load()
    model = getattr(transformers, model)(getattr(transformers, config)(**kwargs)).eval()
    experts = next(m for m in model.modules() if hasattr(m, "_is_expert_parallel"))
    seen = []
    handle = experts.register_forward_hook(lambda m, args, out: seen.append(args[1]))
    with torch.no_grad():
        model(*inputs)
    handle.remove()
    return torch.bincount(seen[0].reshape(-1), minlength=experts.num_experts).tolist()


@pytest.mark.parametrize("name", sorted(MOE_MODELS))
def test_a_transformers_moe_decoder_checks_and_emulates_bit_exact(tmp_path, name):
    prep, cycles = check_and_emulate(make_recipe(tmp_path, name))
    assert cycles[4] < cycles[1]
    [layer] = moe_layers(prep.graph)
    assert (layer.experts, layer.top_k, layer.tokens) == (4, 2, 8)
    assert all(x.count > 0 for x in layer.routed) and len(layer.routed) == sum(n > 0 for n in layer.counts)
    if name == "glm4_moe":  # one group of two experts kept a token: each token's two experts share a group
        assert {op.kind for op in prep.graph.ops} >= {"scatter", "bitwise_not", "cast", "where"}
    captured = moe_layers(prep.pipe.graphs[0])[0].counts
    assert sum(layer.counts) == 16 and captured == torch_routing(name, prep.inputs)
    if name == "flex_olmo":
        assert captured == [8, 1, 2, 5] and layer.counts == [8, 0, 2, 6]
    kind = {op.name: op.kind for op in prep.graph.ops}
    kinds = {kind[n] for x in layer.routed for n in x.ops}
    # each expert: its gather, two int8 products (quantized as any linear), its scaled sum
    assert {"moe_tokens", "index", "quantize", "matmul", "moe_weights", "index_add"} <= kinds
    assert all([kind[n] for n in x.ops].count("matmul") == 2 for x in layer.routed)


def test_the_captured_graph_follows_the_recorded_routing_and_refuses_another(tmp_path):
    """The graph computes the routing at run time (top-k on the router's softmax, then each
    expert's token ids): on the example inputs it gives PyTorch's output; inputs that route
    differently stop with the expert, the count and the recorded one."""
    from dse.workload.capture import capture

    config, model, kwargs = MOE_MODELS["mixtral"]
    torch.manual_seed(0)
    model = getattr(transformers, model)(getattr(transformers, config)(**kwargs)).eval()
    tokens = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))
    graph = capture(model, tokens)
    with torch.no_grad():
        expected = model(tokens).logits
    assert torch.allclose(graph.run(tokens)[0], expected, atol=1e-6)
    topk = [op for op in graph.ops if op.kind == "topk"]
    assert [(op.attrs["k"], op.attrs["item"]) for op in topk] == [(2, 0), (2, 1)]
    other = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(7))
    with pytest.raises(ValueError, match=r"tokens to expert \d, the captured routing \d"):
        graph.run(other)


HAND_WRITTEN = ("""
class M(nn.Module):
    \"\"\"A dense-dispatch MoE written by hand: top-2 of 4 experts, each expert over every token
    weighted by a one-hot routing mask (scatter_add of the weights); a sort and a cumsum of
    the routing counts (a capacity's bookkeeping) feed a bias.\"\"\"
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(8, 4)
        self.experts = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

    def forward(self, x):
        probs = self.router(x).softmax(-1)
        weights, chosen = probs.topk(2, dim=-1)
        dense = torch.zeros_like(probs).scatter_add(-1, chosen, weights)     # [T, E]
        load = nn.functional.one_hot(chosen, 4).sum(dim=(0, 1))            # tokens per expert
        order = load.sort(descending=True).values.cumsum(0)
        out = sum(dense[:, e:e + 1] * self.experts[e](x) for e in range(4))
        return out + order[-1] * 0.01
""", "torch.randn(6, 8, generator=g)")


def test_a_hand_written_dense_moe_checks_and_emulates_with_the_router_ops(tmp_path):
    """topk, scatter_add, one_hot, sort and cumsum as core ops (each against PyTorch), the
    experts' products on the matrix Ball: bit-exact with 1 and 4 workers."""
    from test_simple_ops import checked

    prep, rep = checked(tmp_path, "hand_written", {"hand_written": HAND_WRITTEN})
    kinds = {op.kind for op in prep.graph.ops}
    assert {"topk", "scatter_add", "one_hot", "sort", "cumsum"} <= kinds
    how = {(r.kind, r.how) for r in rep.lowered.ops}
    assert {("topk", "core"), ("scatter_add", "core"), ("sort", "core"), ("cumsum", "core")} <= how


# --- a declared routing (dse.analytical.moe) ---

def mixtral(zero_router: bool = False):
    """The tiny Mixtral of MOE_MODELS (the recipe's weights); a zeroed router ties every
    expert, and top-k picks the same two for every token."""
    config, model, kwargs = MOE_MODELS["mixtral"]
    torch.manual_seed(0)
    model = getattr(transformers, model)(getattr(transformers, config)(**kwargs)).eval()
    if zero_router:
        for layer in model.modules():
            if type(layer).__name__ == "MixtralTopKRouter":
                torch.nn.init.zeros_(layer.weight)
    return model


TOKENS = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("total,shares,cap,expected", [
    (16, [1, 1, 1, 1], 8, [4, 4, 4, 4]),
    (10, [1, 1, 1, 1], 8, [3, 3, 2, 2]),  # remainders to the first experts
    (16, [1, 1 / 2, 1 / 3, 1 / 4], 8, [8, 4, 2, 2]),  # 7.68, 3.84, 2.56, 1.92
    (16, [1, 2 ** -50, 3 ** -50, 4 ** -50], 8, [8, 8, 0, 0]),  # expert 0 capped at 8, the rest to expert 1
    (12, [1, 1, 1], 4, [4, 4, 4]),
])
def test_declared_routings_share_the_tokens_by_largest_remainders_under_the_cap(total, shares, cap, expected):
    from dse.analytical.moe import _apportion

    assert _apportion(total, shares, cap) == expected


def test_a_skewed_routing_costs_what_a_graph_routed_so_costs():
    """A random router (recorded 3, 2, 6, 5 tokens) costed as skew:50 (8, 8, 0, 0) costs
    what the model costs for a zeroed router, whose ties route every token to the same two
    experts (0, 0, 8, 8): same shapes, same cycles. Balanced gives 4 each; a capacity factor
    of 1.25 (5 tokens) makes the recorded routing infeasible, with its reason."""
    from dse.analytical import estimate, summarize
    from dse.analytical.moe import parse_routing, routed
    from dse.chips import load_chip
    from dse.mapping import Candidate, Mapping
    from dse.workload.capture import capture

    tied, recorded = capture(mixtral(True), TOKENS), capture(mixtral(), TOKENS)
    assert moe_layers(tied)[0].counts == [0, 0, 8, 8] and moe_layers(recorded)[0].counts == [3, 2, 6, 5]
    cands = [Candidate(load_chip("goban"), Mapping(workers=w)) for w in (1, 4)]

    def cycles(graph):
        return summarize(estimate(graph, cands), cands)["latency_cycles"].tolist()

    skewed = routed(recorded, parse_routing("skew:50"))
    assert skewed.note == "routing skew:50: moe_experts tokens per expert [8, 8, 0, 0]"
    assert cycles(skewed.graph) == cycles(tied) != cycles(recorded)
    assert [x.count for x in moe_layers(skewed.graph)[0].routed] == [8, 8] and skewed.imbalance == 2.0
    balanced = routed(recorded, parse_routing("balanced"), 1.25)
    assert balanced.reason == "" and moe_layers(balanced.graph)[0].counts == [4, 4, 4, 4]
    over = routed(recorded, parse_routing("measured"), 1.25)
    assert over.reason == ("routing measured sends 6 tokens to expert 2 of moe_experts, over its capacity 5 "
                           "(capacity_factor 1.25 x 16 routed tokens / 4 experts)")


# --- expert placement (mapping.experts) ---

def test_experts_spread_over_four_workers_run_bit_exact_and_beat_split_experts(tmp_path):
    """Each expert whole on worker e mod 4 (its own program there), all at once, one BARRIER:
    bit-exact, the model within 2% of the emulator, faster than every expert split over the
    4 workers; the per-core imbalance is the busiest worker's tokens over the mean."""
    from dse.analytical.moe import estimate_spread
    from dse.chips import load_chip
    from dse.mapping import Candidate, Mapping
    from dse.numerics import emulate_graph
    from dse.numerics.run import prepare_recipe
    from dse.plan.moe import spread_blocks

    prep = prepare_recipe(make_recipe(tmp_path, "mixtral"))
    goban = load_chip("goban")
    emulated = {}
    for experts in ("split", "spread"):
        cand = Candidate(goban, Mapping(workers=4, experts=experts))
        rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
        assert rep.feasible and rep.verdict.passed and rep.verdict.integer_bit_exact, rep.verdict
        emulated[experts] = rep.cycles
    assert emulated["spread"] < emulated["split"]
    [block] = spread_blocks(prep.graph, 4)
    assert block.tokens == (3, 2, 6, 5)  # one expert a worker: its recorded tokens
    _, totals, imbalance = estimate_spread(prep.graph, [Candidate(goban, Mapping(workers=4, experts="spread"))])
    assert abs(totals["latency_cycles"][0] / emulated["spread"] - 1) < 0.02
    assert imbalance == [6 / 4]


# --- the spec: workload.routing and workload.capacity_factor ---

SPEC = """
[experiment]
name = "routing"
hypothesis = "h"

[workload]
recipe = "{recipe}"
{workload}

[baseline]
chip = "goban"
mapping = {{ workers = 4 }}

[[space]]
name = "experts"
target = "mapping.experts"
values = ["split", "spread"]

[[objectives]]
metric = "latency_cycles"
"""


def test_a_sweep_costs_the_declared_routing_and_records_an_over_capacity_one_infeasible(tmp_path):
    """Into a real store: balanced routing fits a capacity factor of 1.0 and is named in
    each candidate's notes, with the experts' imbalance; skew:1 overflows it: every
    candidate infeasible, the reason naming the expert, its tokens and the capacity."""
    from dse.records import Store
    from dse.runner import run_sweep

    recipe = make_recipe(tmp_path, "mixtral")
    db = tmp_path / "r.db"
    for routing, feasible in (("balanced", True), ("skew:1", False)):
        spec = tmp_path / f"{routing.replace(':', '')}.toml"
        text = SPEC.format(recipe=recipe, workload=f'routing = "{routing}"\ncapacity_factor = 1.0')
        spec.write_text(text.replace('name = "routing"', f'name = "{routing.replace(":", "")}"'))
        result = run_sweep(spec, db, progress=False)
        with Store(db) as store:
            cands = store.candidates(result.experiment_id)
            runs = store.runs(result.experiment_id)
            metrics = store.metric_table(result.experiment_id, "analytical")
        assert len(runs) == 3  # the baseline (experts unset), split, spread
        if feasible:
            assert (runs["status"] == "ok").all()
            assert set(cands["notes"]) == {"routing balanced: moe_experts tokens per expert [4, 4, 4, 4] (capacity 4)"}
            assert (metrics["expert_imbalance"] == 1.0).all()
            assert metrics["core_imbalance"].dropna().tolist() == [1.0]  # the spread one: one expert a worker
        else:
            assert (runs["status"] == "infeasible").all()
            assert set(runs["reason"]) == {"routing skew:1 sends 8 tokens to expert 0 of moe_experts, over its "
                                           "capacity 4 (capacity_factor 1 x 16 routed tokens / 4 experts)"}


BAD_ROUTINGS = ["foo", "skew:-1", "skew:", "skew:x", "Balanced", "skew:1:2", "skew:inf", " measured"]


@pytest.mark.parametrize("workload,field,value", [
    *[(f'routing = "{r}"', "workload.routing", r) for r in BAD_ROUTINGS],
    ("capacity_factor = 0", "workload.capacity_factor", "0"),
    ("capacity_factor = -1.5", "workload.capacity_factor", "-1.5"),
    ("capacity_factor = nan", "workload.capacity_factor", "nan"),
])
def test_a_bad_routing_or_capacity_is_the_specs_error(tmp_path, capsys, workload, field, value):
    from test_edges_generated import assert_one_line, experiment_rows, run

    spec, db = tmp_path / "spec.toml", tmp_path / "s.db"
    spec.write_text(SPEC.format(recipe="gemm", workload=workload))
    code, _, err = run(capsys, ["sweep", spec, "--db", db, "--no-progress"])
    assert_one_line(code, err)
    assert str(spec) in err and field in err and value in err
    allowed = "balanced, measured or skew:<s>" if field.endswith("routing") else "greater than 0"
    assert allowed in err or "finite" in err
    assert experiment_rows(db) == 0


@pytest.mark.parametrize("workload,field", [('routing = "balanced"', "workload.routing"),
                                            ("capacity_factor = 2.0", "workload.capacity_factor")])
def test_a_routing_for_a_workload_with_no_moe_layer_is_the_specs_error(tmp_path, capsys, workload, field):
    from test_edges_generated import assert_one_line, experiment_rows, run

    spec, db = tmp_path / "spec.toml", tmp_path / "s.db"
    spec.write_text(SPEC.format(recipe="gemm", workload=workload + "\nparams = { m = 16, n = 16, k = 16 }"))
    code, _, err = run(capsys, ["sweep", spec, "--db", db, "--no-progress"])
    assert_one_line(code, err)
    assert field in err and "has no mixture-of-experts layer" in err
    assert experiment_rows(db) == 0


def test_spread_experts_take_the_batch_columns_with_each_candidates_own_figures(tmp_path):
    """Candidates spreading the experts go through the batch's columns (`_batch_results`) and
    keep what the row-by-row path gave each: totals (core_imbalance where feasible), per-op
    rows, notes, area and energy by component and metric rows."""
    import numpy as np

    from dse.analytical.moe import estimate_spread
    from dse.chips import load_chip
    from dse.mapping import Candidate, Mapping
    from dse.ppa.assess import assess_candidates
    from dse.runner.stages import OP_FIELDS, AnalyticalResult, analytical_batch, analytical_graph, total_metrics

    recipe = make_recipe(tmp_path, "mixtral")
    graph = analytical_graph(recipe, {})
    cands = [Candidate(load_chip("goban", {"banks.count": b}), Mapping(workers=w, experts="spread"))
             for b in (4, 20) for w in (2, 4)]
    for ppa in ({}, None):
        got = analytical_batch(graph, cands, ppa_calibration=ppa)
        # the row-by-row path, as it was
        per_op, totals, imbalances = estimate_spread(graph, cands)
        rows = totals.to_dict("records")
        components, notes = (assess_candidates(rows, cands, [float(f) for f in _footprints(graph, cands)], ppa,
                                               per_op=per_op) if ppa is not None
                             else ([{} for _ in rows], ["" for _ in rows]))
        n_ops = len(graph.ops)
        columns = [per_op[c].tolist() if c in per_op else [None] * len(per_op) for c in OP_FIELDS]
        assert any(t["feasible"] for t in rows) and not all(t["feasible"] for t in rows)
        for i, (t, r) in enumerate(zip(rows, got)):
            want = AnalyticalResult(bool(t["feasible"]), str(t["reason"]), total_metrics(t),
                                    list(zip(*(col[i * n_ops:(i + 1) * n_ops] for col in columns))), notes[i],
                                    components[i])
            if t["feasible"]:
                want.totals["core_imbalance"] = imbalances[i]
            assert (r.feasible, r.reason, r.notes) == (want.feasible, want.reason, want.notes)
            assert list(r.totals) == list(want.totals)
            assert np.allclose(list(r.totals.values()), list(want.totals.values()), rtol=0, atol=0, equal_nan=True)
            assert list(r.ops) == want.ops or all(
                a[:6] == b[:6] and (a[6] == b[6] or a[6] != a[6] and b[6] != b[6]) for a, b in zip(r.ops, want.ops))
            assert dict(r.components) == dict(want.components)
            assert [repr(m) for m in r.metrics()] == [repr(m) for m in want.metrics()]


def _footprints(graph, cands):
    from dse.runner.stages import _footprints as footprints

    return footprints(graph, cands)
