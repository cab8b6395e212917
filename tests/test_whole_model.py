"""A whole model streamed layer by layer (#35): a chain stage with ``repeat = N``
(`recipes/llama3_8b` at the real size; here 4 layers of dim 32): per-layer seeded weights,
one layer alive at a time, the same values as the model built whole, cycles the sum of the
layers'."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

from dse.numerics.chain import check_chain, float_chain, load_chain
from dse.workload.recipes import load_recipe

TINY = dict(seq=8, dim=32, heads=2, kv_heads=1, head_dim=16, ffn=64)
CHAIN = """
[[stage]]
recipe = "llama_layers"
params = { seq = 8, dim = 32, heads = 2, kv_heads = 1, head_dim = 16, ffn = 64 }
repeat = 4
feeds = { hidden = "hidden" }
"""


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    path = tmp_path_factory.mktemp("chain") / "chain.toml"
    path.write_text(CHAIN)
    return load_chain(path)


@pytest.fixture(scope="module")
def goban():
    from dse.chips import load_chip

    return load_chip("goban")


def _weights(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items() if "norm" in k or "proj" in k}


def test_a_repeated_stage_is_one_stage_a_layer_each_fed_by_the_last(stages):
    assert [s.params["layer"] for s in stages] == [0, 1, 2, 3]
    assert [s.label for s in stages][1] == "llama_layers[layer=1]"
    assert [s.feeds for s in stages] == [{}] + [{"hidden": "hidden"}] * 3
    eight_b = load_chain("recipes/llama3_8b")  # the real model: params only, no weights drawn
    assert len(eight_b) == 32 and eight_b[31].params == dict(seq=2048, dim=4096, heads=32, kv_heads=8, head_dim=128,
                                                              ffn=14336, layer=31)


def test_each_layers_weights_are_its_own_and_seeded_by_its_index():
    module = load_recipe("llama_layers").module
    first, again, second = (_weights(module.load(**TINY, layer=k)) for k in (0, 0, 1))
    assert all(torch.equal(first[k], again[k]) for k in first)  # seeded: drawn alike every time
    assert not any(torch.equal(first[k], second[k]) for k in first if "proj" in k)  # another layer, other weights
    whole = _weights(module.load(**TINY, layers=4))  # layer k of the whole model = the layer built alone
    for k in range(4):
        alone = _weights(module.load(**TINY, layer=k))
        assert all(torch.equal(whole[f"layers.{k}.{name[len('layers.0.'):]}"], v) for name, v in alone.items())


def test_the_streamed_float_chain_is_the_whole_model(stages):
    module = load_recipe("llama_layers").module
    hidden, positions = module.inputs(**TINY)
    with torch.no_grad():
        whole = module.load(**TINY, layers=4)(hidden, positions)
    assert torch.equal(float_chain(stages)[-1]["hidden"], whole)


@pytest.fixture(scope="module")
def streamed(stages, goban):
    """The chain emulated on goban, streamed; at each stage's end, which earlier stages'
    graphs (their weights) and pipelines were still alive."""
    alive: list[list[bool]] = []
    refs: list = []

    def on_stage(i, prepared):
        refs.append((weakref.ref(prepared.graph), weakref.ref(prepared.pipe)))
        gc.collect()
        alive.append([g() is not None or p() is not None for g, p in refs[:-1]])

    graphs, emulated = check_chain(stages, goban, on_stage=on_stage)
    return graphs, emulated, alive


def test_one_layer_alive_at_a_time_and_cycles_the_sum_of_the_layers(stages, goban, streamed):
    from dse.mapping import Candidate, Mapping
    from dse.numerics.run import emulate_graph, prepare_recipe

    graphs, emulated, alive = streamed
    assert alive == [[], [False], [False, False], [False, False, False]]  # the earlier layers let go
    assert emulated.passed and graphs.passed and emulated.stage_passed == [True] * 4
    assert emulated.total_cycles == sum(emulated.cycles) and len(emulated.cycles) == 4
    # layer 2 emulated on its own, on layer 1's emulated output: the chain's count for it
    prep = prepare_recipe("llama_layers", stages[2].params)
    inputs = [torch.from_numpy(np.ascontiguousarray(emulated.outputs[1]["hidden"])), prep.inputs[1]]
    alone = emulate_graph(prep.graph, Candidate(goban, Mapping()), inputs, None, prep.tolerance, prep.reference_kind)
    # (its graph calibrated on its own inputs, not the float chain's: the same program shape, the same cycles)
    assert alone.cycles > 0 and alone.cycles == emulated.cycles[2]
    # the graphs' chain took the emulated values where they were bit-exact: one set of outputs
    assert np.array_equal(graphs.outputs[-1]["hidden"].numpy(), emulated.outputs[-1]["hidden"])
    # end to end within the chain's tolerance (4 stages of 0.05), not equal (int8 path)
    (check,) = emulated.checks
    assert emulated.tolerance == pytest.approx(0.2) and 0 < check.max_rel_error <= 0.05


def test_the_streamed_emulation_is_the_whole_models(goban, streamed):
    """The 4 layers as one graph (built whole, quantized on the same float values), emulated
    at once: the same hidden state as the streamed chain's last layer, bit for bit."""
    from dse.mapping import Candidate, Mapping
    from dse.numerics.run import emulate_graph, prepare_recipe

    streamed = streamed[1]
    prep = prepare_recipe("llama_layers", {**TINY, "layers": 4})
    whole = emulate_graph(prep.graph, Candidate(goban, Mapping()), prep.inputs, None, prep.tolerance,
                          prep.reference_kind)
    got = whole.emitted.outputs(whole.result.dram)[prep.graph.outputs[0]]
    assert whole.verdict.passed
    assert np.array_equal(got, streamed.outputs[-1]["hidden"])
    assert whole.cycles > 0 and streamed.total_cycles > 0


def test_a_streamed_chain_keeps_only_the_last_outputs_when_asked(stages):
    graphs, emulated = check_chain(stages[:2], keep_outputs=False)
    assert emulated is None and len(graphs.outputs) == 1 and graphs.passed


@pytest.mark.parametrize("old, new, said", [
    ("repeat = 4", "repeat = 0", "field 'stage[0].repeat': got 0; allowed: a whole number >= 1"),
    ("repeat = 4", 'repeat = 4\nindex = "depth"', "field 'stage[0].index': got 'depth'; allowed: a parameter of "
                                                 "llama_layers's load()"),
    ('feeds = { hidden = "hidden" }', "", "field 'stage[0].feeds': got {}; allowed: at least one input fed"),
], ids=["repeat", "index", "feeds"])
def test_a_bad_repeat_is_one_line_exit_2(cli, tmp_path, old, new, said):
    path = tmp_path / "chain.toml"
    path.write_text(CHAIN.replace(old, new))
    code, _, err = cli("emulate", "--chip", "goban", "--recipe", path)
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
