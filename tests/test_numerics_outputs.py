"""Numerics by output (the design guides' rows): every graph output checked on its own,
under the model's name for it (logits, KV cache), with its magnitudes; the unmodified-graph
check blames the lowering only beyond tolerance, and prints its figures."""

from __future__ import annotations

import numpy as np
import pytest

from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.numerics import OutputCheck, Verdict, compare, emulate_graph, emulate_recipe, unmodified_check, unmodified_summary

# tests/test_numerics.py's small decoder step
DECODE = dict(past=15, vocab=64, dim=32, layers=1, heads=2, kv_heads=1)


@pytest.fixture(scope="module")
def decode_cache(tmp_path_factory):
    """One graph cache for the module: the decoder step is captured once."""
    return tmp_path_factory.mktemp("decode-graph-cache")


@pytest.fixture(scope="module")
def decode(decode_cache):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DSE_CACHE_DIR", str(decode_cache))
        return emulate_recipe("llama_decode", load_chip("goban"), Mapping(), DECODE, check_unmodified=True)


def test_each_output_is_checked_on_its_own_under_the_models_name(decode):
    v = decode.verdict
    assert [o.part for o in v.outputs] == ["logits", "k_cache", "v_cache"]
    logits, k_cache, v_cache = v.outputs
    assert logits.shape == (1, 1, 64) and k_cache.shape == v_cache.shape == (1, 1, 1, 16, 32)  # past 15 + 1, head_dim 32
    for o in v.outputs:  # the quantized path: every output equal to its reference; vs float PyTorch within 5%
        assert o.bit_exact and o.against == "float module" and o.tolerance == 0.05
        assert 0 < o.max_abs_error and o.max_rel_error <= o.tolerance and o.within_tolerance
    # the verdict's one figure is the worst output's
    assert v.max_abs_error == max(o.max_abs_error for o in v.outputs)
    assert v.max_rel_error == max(o.max_rel_error for o in v.outputs)


def test_a_wrong_cache_shows_in_the_cache_alone(decode):
    """The KV cache made wrong in the final DRAM image: k_cache fails with its magnitude,
    logits and v_cache still pass (one figure over all outputs would not say which). The
    image kept whole (`emulate_graph`'s default): `emulate_recipe`'s holds the outputs alone,
    the other buffers given back as each op's check at its BARRIER was done."""
    graph = decode.lowered.graph
    from dse.workload.recipes import instantiate, load_recipe

    _, inputs = instantiate(load_recipe("llama_decode"), **DECODE)  # seeded: the run's own inputs
    kept = emulate_graph(graph, Candidate(load_chip("goban"), Mapping()), inputs)
    assert kept.verdict.to_dict(ops=True)["ops"] == decode.verdict.to_dict(ops=True)["ops"]  # the same run
    low, image = kept.lowered, kept.result.dram.copy()
    k_name = graph.outputs[1]
    view = low.read(image, k_name, copy=False)
    assert not view.flags.owndata  # a view of the image: writing it changes the image
    want = float(np.asarray(view)[0, 0, 0, 3, 5])
    view[0, 0, 0, 3, 5] = want + 2.0
    v = compare(graph, low, image, graph.trace(*inputs), None, 0.05, "quantized", ["logits", "k_cache", "v_cache"])
    by = {o.part: o for o in v.outputs}
    assert by["k_cache"].against == "graph reference" and by["k_cache"].max_abs_error == 2.0
    assert not by["k_cache"].bit_exact and not by["k_cache"].within_tolerance
    scale = float(np.abs(graph.trace(*inputs)[k_name].numpy()).max())
    assert by["k_cache"].max_rel_error == pytest.approx(2.0 / scale)
    for part in ("logits", "v_cache"):
        assert by[part].bit_exact and by[part].max_abs_error == 0.0 and by[part].within_tolerance
    assert not v.passed and v.first_differing_op == graph.producers()[k_name].name


def test_unmodified_check_blames_only_beyond_tolerance_and_says_the_figures(decode):
    u = decode.verdict.unmodified
    # float rounding of the captured graph's products: bits differ, far within 1e-5
    assert u["passed"] is True and u["blame"] is None and u["first_differing_op"] is not None
    assert 0 < u["max_rel_error"] <= u["tolerance"] == 1e-5
    assert [o["part"] for o in u["outputs"]] == ["logits", "k_cache", "v_cache"]
    line = unmodified_summary(u)
    assert line.startswith("PASS: outputs vs PyTorch max abs ") and "(float rounding within tolerance)" in line
    assert line.endswith("blame: none")
    # beyond tolerance on the unmodified graph: the lowering is to blame, with the figure
    far = OutputCheck("linear_7", "logits", (1, 1, 64), False, 0.5, 2e-3, 1e-5, False, "graph reference")
    near = OutputCheck("cat_4", "k_cache", (1, 1, 1, 16, 32), False, 1e-7, 1e-7, 1e-5, True, "graph reference")
    base = Verdict(True, True, False, "matmul", 0, 0.0, 0.0, 1e-5, True, "float", outputs=[far, near])
    got = unmodified_check(decode.verdict, base)
    assert got["passed"] is False and got["blame"] == "lowering" and got["max_rel_error"] == 2e-3
    assert unmodified_summary(got).endswith("blame: lowering") and "rel 0.002 " in unmodified_summary(got)
    # within tolerance on the unmodified graph but the stepped graph fails: the step
    stepped = Verdict(False, False, False, "linear_acc", 1, 0.0, 0.0, 0.05, True, "quantized")
    assert unmodified_check(stepped, Verdict(True, True, False, None, 0, 0.0, 0.0, 1e-5, True, "float",
                                             outputs=[near]))["blame"] == "step"


def test_cli_emulate_prints_each_output_and_the_unmodified_figures(cli, decode, decode_cache, monkeypatch):
    monkeypatch.setenv("DSE_CACHE_DIR", str(decode_cache))  # the fixture's capture, not a second one
    args = [f"{k}={v}" for k, v in DECODE.items()]
    code, out, err = cli("emulate", "--chip", "goban", "--recipe", "llama_decode", *sum((["--param", a] for a in args), []),
                         "--check-unmodified")
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.startswith("  output logits (") and "within" in line for line in lines)
    assert any(line.startswith("  output k_cache (") for line in lines)
    unmodified = next(line for line in lines if line.startswith("unmodified graph"))
    assert "PASS: outputs vs PyTorch max abs" in unmodified and "blame: none" in unmodified
    assert "passed: False" not in out
