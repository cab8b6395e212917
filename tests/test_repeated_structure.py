"""A repeated structure captured and checked once (#35, policy B; `dse.frontend.repeated`):
a chain's later repetitions reuse the first one's checked graph with their own weights,
calibration and quantization, and give what full checks give (tiny llama_layers)."""

from __future__ import annotations

import numpy as np
import pytest

import dse.frontend.repeated as repeated
from dse.numerics.chain import check_chain, load_chain

LAYER = 'recipe = "llama_layers"\nfeeds = { hidden = "hidden" }\n'
PARAMS = "seq = 8, dim = 32, heads = 2, kv_heads = 1, head_dim = 16"
THREE = f"[[stage]]\n{LAYER}params = {{ {PARAMS}, ffn = 64 }}\nrepeat = 3\n"
# two runs of repeated layers, the second of another ffn: another structure
TWO_KINDS = (f"[[stage]]\n{LAYER}params = {{ {PARAMS}, ffn = 64 }}\nrepeat = 2\n\n"
             f"[[stage]]\n{LAYER}params = {{ {PARAMS}, ffn = 32, layer = 2 }}\nrepeat = 2\n")


@pytest.fixture(scope="module")
def goban():
    from dse.chips import load_chip

    return load_chip("goban")


def _stages(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("chain") / "chain.toml"
    path.write_text(text)
    return load_chain(path)


@pytest.fixture(scope="module")
def three(tmp_path_factory, goban):
    stages = _stages(tmp_path_factory, THREE)
    return {every: check_chain(stages, goban, check_every_layer=every) for every in (False, True)}


def test_reused_layers_emulate_as_fully_checked_ones(three):
    (graphs, reused), (full_graphs, full) = three[False], three[True]
    assert reused.passed and full.passed and graphs.passed and full_graphs.passed
    assert reused.cycles == full.cycles and all(c > 0 for c in reused.cycles)
    assert reused.stage_passed == full.stage_passed == [True] * 3
    # the same quantized graphs: the same emulated hidden state, bit for bit, and one verdict
    assert np.array_equal(reused.outputs[-1]["hidden"], full.outputs[-1]["hidden"])
    assert [vars(c) for c in reused.checks] == [vars(c) for c in full.checks]
    assert [vars(c) for c in graphs.checks] == [vars(c) for c in full_graphs.checks]


def test_the_notes_say_which_layers_were_checked_in_full(three):
    reused, full = three[False][1], three[True][1]
    assert reused.checked == ["checked in full"] + ["reused llama_layers[layer=0]'s checked structure"] * 2
    assert full.checked == ["checked in full"] * 3
    notes = [line for line in reused.lines() if "note:" in line]
    assert notes == ["  note: stage 0 (llama_layers[layer=0]): frontend checked in full",
                     "  note: stages 1-2 (llama_layers[layer=1] ... llama_layers[layer=2]): frontend reused "
                     "llama_layers[layer=0]'s checked structure",
                     "  note: a reused stage: its own weights, calibration and quantization, not exported again; no "
                     "per-stage, vacuous or integer re-check; the float graph it is quantized from checked against "
                     "its module's forward (calibration's trace); --check-every-layer checks every stage in full"]
    assert not [line for line in full.lines() if "a reused stage" in line]


def test_another_structure_is_checked_in_full(tmp_path_factory):
    stages = _stages(tmp_path_factory, TWO_KINDS)
    graphs, _ = check_chain(stages)
    assert graphs.passed
    assert graphs.checked == ["checked in full", "reused llama_layers[layer=0]'s checked structure",
                              "checked in full", "reused llama_layers[layer=2]'s checked structure"]


def test_a_buffer_unlike_the_first_instances_is_no_reuse():
    from dse.workload.capture import capture
    from dse.workload.recipes import instantiate, load_recipe

    recipe = load_recipe("llama_layers")
    first, inputs = instantiate(recipe, layer=0)
    structure = repeated.remember("key", "layer 0", capture(first, *inputs), first, [])
    assert set(structure.slots.values()) >= {"layers.0.gate_proj.weight", "mask"} and not structure.captured.weights
    second, _ = instantiate(recipe, layer=1)
    graph, why = repeated.substituted(structure, second)
    assert why == "" and graph.weights["p_layers_0_gate_proj_weight"] is not None
    second.mask[0, 0] = 1.0
    assert repeated.substituted(structure, second) == (None, "buffer mask differs from layer 0's")


def test_a_wrong_weight_substituted_is_caught(tmp_path_factory, goban, monkeypatch):
    """Layer 1's gate and up projections put in each other's slots (same shape): its graph
    and emulation still agree bit for bit (the emulator runs the graph it is given), but the
    float graph it was quantized from no longer computes its module: the stage fails."""
    remember = repeated.remember

    def swapped(*args, **kwargs):
        structure = remember(*args, **kwargs)
        slots = structure.slots
        gate, up = "p_layers_0_gate_proj_weight", "p_layers_0_up_proj_weight"
        slots[gate], slots[up] = slots[up], slots[gate]
        return structure

    monkeypatch.setattr(repeated, "remember", swapped)
    stages = _stages(tmp_path_factory, THREE)
    graphs, emulated = check_chain(stages, goban)
    assert not emulated.passed and not graphs.passed
    assert emulated.reason.startswith("llama_layers[layer=1]: frontend stage permute failed: output")
    assert "max abs error" in emulated.reason and emulated.stage_passed == [True]


def test_check_every_layer_reaches_the_chain_command(cli, tmp_path):
    """The flag reaches `check_chain` from `dse recipe chain` (the reused stages' notes: above)."""
    path = tmp_path / "chain.toml"
    path.write_text(THREE)
    code, out, _ = cli("recipe", "chain", path, "--check-every-layer")
    assert code == 0, out
    assert "note: stages 0-2 (llama_layers[layer=0] ... llama_layers[layer=2]): frontend checked in full" in out
    assert "reused" not in out


def test_check_every_layer_without_a_chain_is_one_line_exit_2(cli):
    code, _, err = cli("emulate", "--chip", "goban", "--recipe", "mlp", "--check-every-layer")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "field '--check-every-layer': got True; allowed: a chain as --recipe" in err
