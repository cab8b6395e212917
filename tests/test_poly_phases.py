"""The placement knob in a sweep (#19): experiments/poly_phases.toml (tiny llama's prefill
and decode as two stages) through the analytical stage and the emulator stage, recorded in
the store like every other knob; a staged workload's bad input is an InputError naming the
spec, the field and what is allowed (the CLI's one line and exit 2 for any InputError is
tested in test_runner / test_cli_edges)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dse.errors import InputError
from dse.records import Store
from dse.runner import run_sweep
from dse.runner.spec import load_spec

SPEC = Path(__file__).resolve().parents[1] / "experiments" / "poly_phases.toml"


def test_poly_phases_sweeps_the_placement_through_both_stages(tmp_path):
    # the shipped spec, its emulator stage on the two best candidates only (test time)
    spec = tmp_path / "poly_phases.toml"
    text = SPEC.read_text()
    assert 'emulator = "all"' in text
    spec.write_text(text.replace('emulator = "all"', 'emulator = "top_k"\ntop_k = 2'))
    db = tmp_path / "r.db"
    result = run_sweep(spec, db, progress=False)
    assert result.evaluated == 6 and result.proposed == "confirmed"
    with Store(db) as store:
        cands = store.candidates("poly_phases").sort_values("id")
        runs = store.runs("poly_phases")
        model = store.metric_table("poly_phases", "analytical").set_index("candidate_id")
        emu = store.metric_table("poly_phases", "emulator_cycles").set_index("candidate_id")
        num = store.metric_table("poly_phases", "numerics").set_index("candidate_id")
    ids = cands["id"].tolist()
    base, four, slow_core, no_groups, spmd_groups, phase = ids
    placements = [json.loads(m).get("placement") for m in cands["mapping"]]
    assert placements == [None, None, "phase", "phase", None, "phase"]
    # the core-groups knob: a whole list of groups, recorded in the candidate's chip
    groups = json.loads(cands.set_index("id").loc[phase, "config"])["cores"]["groups"]
    assert [(g["role"], g["count"], g.get("banks", {}).get("count")) for g in groups] == [
        ("prefill", 3, None), ("decode", 2, 12)]
    analytical = runs[runs["stage"] == "analytical"].set_index("candidate_id")
    assert analytical.loc[spmd_groups, "status"] == "infeasible"
    assert analytical.loc[spmd_groups, "reason"].startswith("5 workers span core groups prefill, decode of chip poly")
    assert analytical.loc[no_groups, "reason"] == ("placement \"phase\" puts stage 'prefill' on the core group of "
                                                   "that role, but chip poly has no core groups")
    emulated = [base, phase]
    assert emu["latency_cycles"].notna().sum() == 2
    assert (num.loc[emulated, "integer_bit_exact"] == 1).all() and (num.loc[emulated, "passed"] == 1).all()
    # the phases on their groups beat five identical cores one after another, with less SRAM;
    # with the chip's 4-cycle core on the decode cores they do not (the model says)
    assert emu.loc[phase, "latency_cycles"] < emu.loc[base, "latency_cycles"]
    assert model.loc[phase, "latency_cycles"] < model.loc[base, "latency_cycles"] < model.loc[slow_core,
                                                                                            "latency_cycles"]
    assert model.loc[four, "private_sram_bytes"] < model.loc[phase, "private_sram_bytes"]
    assert model.loc[phase, "private_sram_bytes"] == (3 * 16 + 2 * 12) * 16384 < model.loc[base, "private_sram_bytes"]
    for i in emulated:  # the model follows the emulator for every placement
        assert abs(model.loc[i, "latency_cycles"] / emu.loc[i, "latency_cycles"] - 1) < 0.03
    # per-op analytical rows name their stage
    with Store(db) as store:
        per_op = store.metric_table("poly_phases", "analytical", scope="op")
    scoped = set(per_op.loc[per_op["candidate_id"] == phase, "scope_key"])
    assert any(k.startswith("prefill:") for k in scoped) and any(k.startswith("decode:") for k in scoped)


@pytest.mark.parametrize("old, new, field, allowed", [
    ('role = "prefill"\n', "", "workload.role", "the role of the workload's own stage"),
    ('role = "decode"', 'role = "prefill"', "workload.stages[0].role", "a role no other stage has"),
    ('recipe = "llama_decode"', 'recipe = "llama_decodr"', "workload.stages[0].recipe", "one of "),
    ("past = 15", "past = 15, wings = 2", "workload.stages[0].params", "wings"),
    ('target = "mapping.placement"\nvalues = ["spmd", "phase"]', 'target = "workload.params.seq"\nvalues = [8, 16]',
     "space[1].target", "not supported with workload.stages"),
    ('values = [[], [', 'values = [[], "prefill", [', "space[0]", "a list of groups"),
    ('values = ["spmd", "phase"]', 'values = ["spmd", "pipelined"]', "mapping.placement", "'phase'"),
])
def test_a_bad_staged_workload_is_one_line(tmp_path, old, new, field, allowed):
    bad = tmp_path / "bad.toml"
    text = SPEC.read_text()
    assert old in text
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(InputError) as exc:
        load_spec(bad)
    assert field in exc.value.field and allowed in str(exc.value) and str(bad) in str(exc.value)
