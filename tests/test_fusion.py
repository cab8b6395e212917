"""Fusion as a knob (#19, mapping.fusion): in a conv -> ReLU -> conv chain the core-side
ReLU is materialized (the default) or applied by the next conv's first copy. Results stay
bit for bit, the model follows the emulator, the saving is the ReLU's pass, and the knob
sweeps and refuses bad values."""

import json

import pytest

from agreement import emulated_and_modelled, swept_spec
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.numerics.run import prepare_recipe
from dse.plan.graph_plan import plan_graph


@pytest.fixture(scope="module")
def block():
    return prepare_recipe("resnet_block", {"channels": 16, "size": 8})


def test_the_inner_relu_is_fused_into_the_next_convs_pad_copy(block):
    plans = {p.op.name: p for p in plan_graph(block.graph, "fuse")}
    assert plans["relu_int8"].unit == "fused"
    pad = next(c for c in plans["conv2d_1_acc"].copies if c.kind == "pad")
    assert pad.apply == "relu" and pad.tensor == "conv2d_requant"
    # the block's last ReLU (float, a graph output) and the default plan stay as they were
    assert plans["relu_1"].unit == "core"
    assert {p.unit for p in plan_graph(block.graph)} >= {"core"} and "fused" not in {p.unit for p in plan_graph(block.graph)}
    assert Candidate(load_chip("goban"), Mapping(fusion="materialize")).hash == Candidate(load_chip("goban"), Mapping()).hash


def test_fusing_saves_the_relus_pass_bit_exact_and_the_model_follows(block):
    chip = load_chip("goban")
    cycles = {}
    for workers in (1, 4):
        for fusion in ("materialize", "fuse"):
            cand = Candidate(chip, Mapping(workers=workers, fusion=fusion))
            rep, model, _ = emulated_and_modelled(block, cand)
            cycles[workers, fusion] = rep.cycles, model["latency_cycles"], rep.verdict.integer_tensors
    # one worker: the ReLU's (1, 8, 8, 16) int8 pass at 4 cycles an element, in both
    emu_m, model_m, checked_m = cycles[1, "materialize"]
    emu_f, model_f, checked_f = cycles[1, "fuse"]
    assert emu_m - emu_f == model_m - model_f == 8 * 8 * 16 * 4
    assert checked_f == checked_m - 1  # the fused tensor is never written; its reader is checked
    assert cycles[4, "fuse"][0] < cycles[4, "materialize"][0]


def test_a_sweep_over_fusion_records_both_and_a_bad_value_is_exit_2(tmp_path, repo, cli):
    spec, cands, model = swept_spec(repo, tmp_path, "fusion")
    by = {(json.loads(m)["workers"], json.loads(m).get("fusion", "materialize")): h
          for h, m in zip(cands["hash"], cands["mapping"])}
    assert set(by) == {(w, f) for w in (1, 4) for f in ("materialize", "fuse")}
    for w in (1, 4):
        assert model.loc[by[w, "fuse"], "latency_cycles"] < model.loc[by[w, "materialize"], "latency_cycles"]
    bad = tmp_path / "bad.toml"
    bad.write_text(spec.replace('"materialize", "fuse"', '"materialize", "always"'))
    code, _, err = cli("sweep", bad, "--db", tmp_path / "bad.db", "--no-progress")
    assert code == 2 and str(bad) in err and "mapping.fusion" in err and "always" in err and "'fuse'" in err
    assert not (tmp_path / "bad.db").exists()
