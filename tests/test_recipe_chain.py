"""Chained recipe graphs (#32): a chain.toml's stages, one graph's outputs the next graph's
inputs (llama prefill's KV cache feeding a decode step, tiny configs), checked end to end
against the float chain of the PyTorch modules, and emulated stage by stage on the previous
stage's emulated outputs (goban)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dse.numerics.chain import _checks, emulate_chain, float_chain, graph_chain, load_chain

CHAIN = Path(__file__).resolve().parents[1] / "recipes" / "llama_prefill_decode"


@pytest.fixture(scope="module")
def chain():
    stages = load_chain(CHAIN)
    return stages, float_chain(stages)


def test_the_float_chain_feeds_prefills_cache_to_decode(chain):
    from dse.workload.recipes import load_recipe

    stages, reference = chain
    prefill, decode = reference
    assert [s.recipe for s in stages] == ["llama_prefill", "llama_decode"]
    assert tuple(prefill["k_cache"].shape) == (1, 1, 1, 4, 16) and tuple(decode["k_cache"].shape) == (1, 1, 1, 5, 16)
    # The decode step's cache is the prompt's, then its own token's: the feed, float for float.
    assert torch.equal(decode["k_cache"][..., :4, :], prefill["k_cache"])
    assert torch.equal(decode["v_cache"][..., :4, :], prefill["v_cache"])
    # = the decode module run by hand on the prefill module's cache
    module = load_recipe("llama_decode").module
    tokens, positions, _, _ = module.inputs(**stages[1].params)
    with torch.no_grad():
        logits, _, _ = module.load(**stages[1].params)(tokens, positions, prefill["k_cache"], prefill["v_cache"])
    assert torch.equal(logits, decode["logits"])


def test_the_chain_is_checked_end_to_end_and_emulated_stage_by_stage(chain):
    from dse.chips import load_chip

    stages, reference = chain
    graphs = graph_chain(stages, reference)
    assert graphs.passed and graphs.tolerance == pytest.approx(0.1)  # two stages of 0.05
    assert [c.part for c in graphs.checks] == ["logits", "k_cache", "v_cache"]
    assert all(0 < c.max_abs_error <= c.tolerance * 2 for c in graphs.checks)  # quantized: not equal, within
    emulated = emulate_chain(stages, load_chip("goban"), reference=reference)
    assert emulated.passed and emulated.stage_passed == [True, True] and all(c > 0 for c in emulated.cycles)
    # Stage 1 ran on stage 0's emulated cache: its cache begins with those very values.
    first, second = emulated.outputs
    assert np.array_equal(np.asarray(second["k_cache"])[..., :4, :], np.asarray(first["k_cache"]))
    # bit-exact lowering: the emulated chain ends where the frontend's graphs end
    assert [c.max_abs_error for c in emulated.checks] == [c.max_abs_error for c in graphs.checks]
    for part in ("logits", "k_cache", "v_cache"):
        assert np.array_equal(np.asarray(second[part]), graphs.outputs[1][part].numpy())


def test_a_check_beyond_the_chains_tolerance_fails():
    (check,) = _checks({"x": np.array([1.0, 2.0])}, {"x": torch.tensor([1.0, 2.5])}, 0.1)
    # max abs 0.5, max |reference| 2.5: rel 0.2 > 0.1
    assert (check.max_abs_error, check.max_rel_error, check.within_tolerance) == (0.5, pytest.approx(0.2), False)


def test_a_bad_chain_is_one_line_exit_2(cli, tmp_path):
    text = (CHAIN / "chain.toml").read_text()
    cases = [
        (text.replace("past_k =", "past_q ="), "field 'stage[1].feeds': got 'past_q'; allowed: an input of "
                                              "llama_decode: tokens, positions, past_k, past_v"),
        (text.replace('"k_cache"', '"q_cache"'), "allowed: an output of llama_prefill (its OUTPUTS): logits, "
                                                 "k_cache, v_cache"),
        (text.replace("past = 4", "past = 3"), "allowed: the input's shape (1, 1, 1, 3, 16)"),
    ]
    for i, (bad, said) in enumerate(cases):
        path = tmp_path / f"bad{i}.toml"
        path.write_text(bad)
        code, out, err = cli("recipe", "chain", path)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    code, out, _ = cli("recipe", "chain", CHAIN)
    assert code == 0 and "frontend graphs: llama_prefill -> llama_decode: passed" in out
