"""Knobs over the Ball set (chip), the partition strategy and the quantization granularity
(mapping): spec parsing, bad values (exit 2 naming file, field, value and what is allowed),
and small real sweeps whose records differ in the knob."""

import json
import shutil

import numpy as np
import pytest

from dse.chips import load_chip
from dse.identity import content_hash
from dse.mapping import Candidate, Mapping
from dse.records import Store
from dse.runner import load_spec, run_sweep

SPEC = """
[experiment]
name = "{name}"
hypothesis = "knob {name} changes the gemm"

[workload]
recipe = "{recipe}"
params = {{ m = 32, n = 32, k = 32 }}

[baseline]
chip = "goban"
{mapping}

{space}

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"

[stages]
emulator = "{emulator}"
"""


def write(tmp_path, space, name="knob", emulator="none", recipe="gemm", mapping=""):
    path = tmp_path / f"{name}.toml"
    path.write_text(SPEC.format(name=name, space=space, emulator=emulator, recipe=recipe, mapping=mapping))
    return path


def knob(name, target, values):
    return f'[[space]]\nname = "{name}"\ntarget = "{target}"\nvalues = {values}\n'


def records(db, name):
    with Store(db) as store:
        return store.candidates(name).sort_values("id").to_dict("records"), store.runs(name)


# -- the Ball set ---------------------------------------------------------------------------

BALLS = knob("balls", "chip.balls", '["matrix,fp2int,int2fp,transpose", ["transpose", "matrix"], "matrix"]')


def test_ball_set_values_are_sets_in_one_spelling(tmp_path):
    spec = load_spec(write(tmp_path, BALLS))
    k = spec.model.space[0]
    assert k.values == ["fp2int,int2fp,matrix,transpose", "matrix,transpose", "matrix"]
    assert spec.space.baseline_values["balls"] == ",".join(sorted(b.kind for b in spec.baseline_chip.balls))
    chip, _ = spec.apply({"balls": "matrix,transpose"})
    # The baseline's own Balls (ports, latency), in its order, the others removed.
    assert [b.kind for b in chip.balls] == [b.kind for b in spec.baseline_chip.balls if b.kind in ("matrix", "transpose")]
    assert chip.ball("matrix") == spec.baseline_chip.ball("matrix")


def test_ball_set_sweep_records_candidates_differing_in_their_balls(tmp_path):
    db = tmp_path / "r.db"
    result = run_sweep(write(tmp_path, BALLS), db, progress=False)
    cands, runs = records(db, "knob")
    kinds = [sorted(b["kind"] for b in json.loads(c["config"])["balls"]) for c in cands]
    assert ["matrix"] in kinds and ["matrix", "transpose"] in kinds
    assert len({c["hash"] for c in cands}) == len(cands) == result.evaluated
    diffs = [json.loads(c["diff"]) for c in cands]
    assert {"config.balls": ["fp2int,int2fp,matrix,transpose", "matrix"]} in diffs
    assert set(runs["status"]) <= {"ok", "infeasible"}
    # Resuming reads the Ball sets back from the records: nothing new to evaluate.
    again = run_sweep(write(tmp_path, BALLS), db, progress=False)
    assert again.evaluated == 0 and again.resumed == len(cands)


@pytest.mark.parametrize("values,bad,allowed", [
    ('["matrix,relu"]', "relu", "Balls of the baseline chip goban: matrix"),  # a Ball goban lacks
    ('[["matrix", "warp"]]', "warp", "not a Ball kind at all"),
])
def test_unknown_ball_is_exit_2_naming_file_field_value_allowed(tmp_path, cli, values, bad, allowed):
    path = write(tmp_path, knob("balls", "chip.balls", values))
    db = tmp_path / "r.db"
    code, _, err = cli("sweep", path, "--db", db, "--no-progress")
    assert code == 2, err
    assert str(path) in err and "field 'space[0].values'" in err and bad in err and allowed in err
    assert not db.exists()


def test_an_empty_ball_set_is_exit_2(tmp_path, cli):
    code, _, err = cli("sweep", write(tmp_path, knob("balls", "chip.balls", '["", "matrix"]')), "--db",
                       tmp_path / "r.db", "--no-progress")
    assert code == 2 and "space[0] (balls) -> chip.balls" in err and "at least one Ball" in err


# -- the partition strategy -----------------------------------------------------------------

SPLIT = knob("split", "mapping.split", '["rows", "cols"]') + knob("workers", "mapping.workers", "[2]")


def test_split_knob_sweep_records_both_partitions(tmp_path):
    db = tmp_path / "r.db"
    run_sweep(write(tmp_path, SPLIT), db, progress=False)
    cands, _ = records(db, "knob")
    splits = {json.loads(c["mapping"])["split"] for c in cands if c["origin"] == "grid"}
    assert splits == {"rows", "cols"}


def test_bad_split_is_exit_2(tmp_path, cli):
    path = write(tmp_path, knob("split", "mapping.split", '["rows", "diagonal"]'))
    code, _, err = cli("sweep", path, "--db", tmp_path / "r.db", "--no-progress")
    assert code == 2 and "space[0] (split) -> mapping.split" in err and "diagonal" in err and "'rows'" in err


# -- the quantization granularity -----------------------------------------------------------

QUANT = knob("quant", "mapping.quantization", '["tensor", "channel"]')


def test_quantization_left_unset_keeps_the_candidate_hash(tmp_path):
    chip = load_chip("goban")
    old = {"policy": "search", "dataflow": "ws", "workers": 1, "split": "rows", "double_buffer": True}
    cand = Candidate(chip, Mapping())
    assert cand.hash == content_hash({"config": chip.model_dump(mode="json"), "mapping": old})
    assert Candidate(chip, Mapping(quantization="tensor")).hash != cand.hash
    assert Candidate(chip, Mapping(quantization="tensor")).hash != Candidate(chip, Mapping(quantization="channel")).hash


def test_bad_quantization_is_exit_2(tmp_path, cli):
    path = write(tmp_path, knob("quant", "mapping.quantization", '["tensor", "row"]'))
    code, _, err = cli("sweep", path, "--db", tmp_path / "r.db", "--no-progress")
    assert code == 2 and "space[0] (quant) -> mapping.quantization" in err and "row" in err and "'channel'" in err


def test_quantization_needs_a_quantize_step(tmp_path, cli, repo):
    recipe = tmp_path / "floatgemm"
    shutil.copytree(repo / "recipes" / "gemm", recipe)
    (recipe / "steps.toml").write_text('[[step]]\nname = "permute"\n')
    path = write(tmp_path, QUANT, recipe=str(recipe))
    code, _, err = cli("sweep", path, "--db", tmp_path / "r.db", "--no-progress")
    assert code == 2 and "field 'space[0].target'" in err and "a recipe with a quantize step" in err


def test_quantization_sweep_emulates_each_granularity(tmp_path):
    from dse.runner.emulation import prepare_emulation

    db = tmp_path / "r.db"
    result = run_sweep(write(tmp_path, QUANT, emulator="all"), db, progress=False)
    cands, runs = records(db, "knob")
    quant = {c["id"]: json.loads(c["mapping"]).get("quantization") for c in cands}
    assert sorted(quant.values(), key=str) == [None, "channel", "tensor"]  # baseline: the recipe's own steps
    assert "quantization" not in json.loads(cands[0]["mapping"])
    emu = runs[runs["stage"] == "emulator"]
    assert len(emu) == 3 and set(emu["status"]) == {"ok"}, emu
    assert result.counts.get("emulator ok") == 3
    # Each candidate was emulated on the graph quantized at its granularity: per tensor
    # is off by more than per channel, which is the recipe's own (the baseline's) choice.
    with Store(db) as store:
        m = store.metrics("knob", kind="numerics")
    err = {quant[c]: v for c, v in m.loc[m["name"] == "max_abs_error", ["candidate_id", "value"]].values}
    assert err["channel"] == err[None] and err["tensor"] > err["channel"]
    # The emulator ran each candidate's graph quantized at its own granularity.
    grains = {}
    for q in ("tensor", "channel"):
        graph = prepare_emulation("gemm", {"m": 32, "n": 32, "k": 32}, q).graph
        grains[q] = {op.attrs.get("b_granularity") for op in graph.ops if "b_granularity" in op.attrs}
    assert grains == {"tensor": {"tensor"}, "channel": {"channel"}}


def test_the_knobs_example_spec_covers_the_chip_and_mapping_knobs(repo):
    spec = load_spec(repo / "experiments" / "knobs.toml")
    targets = {k.target for k in spec.model.space}
    assert {"chip.balls", "mapping.split", "mapping.quantization"} <= targets
    assert spec.grid_size() == 2 * 2 * 3
    # The size knobs the issue names are chip fields a knob can target.
    for target in ("chip.banks.count", "chip.banks.rows", "chip.banks.row_bytes", "chip.banks.channels",
                   "chip.dma.burst_max_bytes", "chip.front_end.rob_entries", "chip.cores.count",
                   "mapping.policy", "mapping.dataflow", "mapping.workers"):
        data = {"chip": spec.baseline_chip.model_dump(mode="json"), "mapping": spec.baseline_mapping.model_dump(mode="json")}
        for part in target.split("."):
            data = data[part]  # KeyError: not a field


# -- temporal spans as the partition strategy -----------------------------------------------

SPANS_SPEC = """
[experiment]
name = "spans"
hypothesis = "temporal spans beat per-op tile splits for a conv1d stack on 4 workers"

[workload]
recipe = "temporal_conv"
params = { length = 64, mels = 16, channels = 32, out_channels = 16 }

[baseline]
chip = "goban"
mapping = { workers = 4 }

[[space]]
name = "partition"
target = "mapping.partition"
values = ["tiles", "spans"]

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"

[stages]
emulator = "all"
"""


def test_partition_spans_is_a_knob_the_model_and_the_emulator_agree_on(tmp_path):
    spec = tmp_path / "spans.toml"
    spec.write_text(SPANS_SPEC)
    result = run_sweep(spec, tmp_path / "s.db", progress=False)
    with Store(tmp_path / "s.db") as store:
        model = store.metric_table(result.experiment_id, "analytical").set_index("hash")
        emu = store.metric_table(result.experiment_id, "emulator_cycles").set_index("hash")
        numerics = store.metric_table(result.experiment_id, "numerics").set_index("hash")
    goban = load_chip("goban")
    tiles = Candidate(goban, Mapping(workers=4)).hash
    spans = Candidate(goban, Mapping(workers=4, partition="spans")).hash
    assert tiles != spans and set(model.index) == {tiles, spans}
    for h in (tiles, spans):
        assert model.loc[h, "status"] == "ok" and emu.loc[h, "status"] == "ok" and numerics.loc[h, "passed"] == 1
        assert abs(model.loc[h, "latency_cycles"] / emu.loc[h, "latency_cycles"] - 1) < 0.01
    # the default spelled out is the default: one identity
    assert Mapping(workers=4, partition="tiles") == Mapping(workers=4)


# -- the activations' calibration rule ------------------------------------------------------

CALIBRATION = knob("calibration", "mapping.calibration", '["absmax", "mse"]')


def test_calibration_knob_sweep_emulates_each_rule_bit_exact(tmp_path):
    """Each candidate runs the graph whose activation scales its rule chose (the mapping
    records the rule, the candidate's identity includes it), and the emulator follows it
    bit for bit: absmax is the recipe's own (the baseline's) graph, mse another."""
    from dse.frontend.quantize import thresholds
    from dse.runner.emulation import prepare_emulation

    assert Candidate(load_chip("goban"), Mapping(calibration="mse")).hash != Candidate(load_chip("goban"), Mapping()).hash
    db = tmp_path / "r.db"
    run_sweep(write(tmp_path, CALIBRATION, emulator="all"), db, progress=False)
    cands, runs = records(db, "knob")
    rule = {c["id"]: json.loads(c["mapping"]).get("calibration") for c in cands}
    assert sorted(rule.values(), key=str) == [None, "absmax", "mse"]
    emu = runs[runs["stage"] == "emulator"]
    assert len(emu) == 3 and set(emu["status"]) == {"ok"}, emu
    with Store(db) as store:
        m = store.metrics("knob", kind="numerics")
    exact = {rule[c]: v for c, v in m.loc[m["name"] == "integer_bit_exact", ["candidate_id", "value"]].values}
    assert exact == {None: 1.0, "absmax": 1.0, "mse": 1.0}
    err = {rule[c]: v for c, v in m.loc[m["name"] == "max_abs_error", ["candidate_id", "value"]].values}
    assert err["absmax"] == err[None] and err["mse"] != err["absmax"]
    params = {"m": 32, "n": 32, "k": 32}
    scales = {}
    for choice in ("+absmax", "+mse"):
        prep = prepare_emulation("gemm", params, choice)
        q = next(op for op in prep.graph.ops if op.kind == "quantize")
        scales[choice] = q.attrs["scale"]
        x = np.asarray(prep.inputs[0])
    assert scales["+mse"] == float(np.float32(127.0 / thresholds(x.reshape(1, -1), "mse")[0]))
    assert scales["+mse"] > scales["+absmax"]  # mse clips: a smaller threshold, a larger scale


ACTIVATION_SCALES = knob("scales", "mapping.activation_scales", '["tensor", "channel"]')


def test_activation_scales_knob_sweep_emulates_each_bit_exact(tmp_path):
    """Per-channel activation scales (moved into the weight) as a mapping knob: each
    candidate runs its own graph, recorded in its mapping and identity, and the emulator
    follows it bit for bit; the two graphs differ in their results, not only in name."""
    from dse.runner.emulation import prepare_emulation

    assert (Candidate(load_chip("goban"), Mapping(activation_scales="channel")).hash
            != Candidate(load_chip("goban"), Mapping()).hash)
    db = tmp_path / "r.db"
    run_sweep(write(tmp_path, ACTIVATION_SCALES, emulator="all"), db, progress=False)
    cands, runs = records(db, "knob")
    scales = {c["id"]: json.loads(c["mapping"]).get("activation_scales") for c in cands}
    assert sorted(scales.values(), key=str) == [None, "channel", "tensor"]
    emu = runs[runs["stage"] == "emulator"]
    assert len(emu) == 3 and set(emu["status"]) == {"ok"}, emu
    with Store(db) as store:
        m = store.metrics("knob", kind="numerics")
    exact = {scales[c]: v for c, v in m.loc[m["name"] == "integer_bit_exact", ["candidate_id", "value"]].values}
    assert exact == {None: 1.0, "tensor": 1.0, "channel": 1.0}
    err = {scales[c]: v for c, v in m.loc[m["name"] == "max_abs_error", ["candidate_id", "value"]].values}
    assert err["tensor"] == err[None] and err["channel"] != err["tensor"]
    prep = prepare_emulation("gemm", {"m": 32, "n": 32, "k": 32}, "++channel")
    quant = next(op for op in prep.graph.ops if op.kind == "quantize")
    assert quant.attrs["scale_axes"] == [1] and len(quant.attrs["scale"]) == 32


def test_bad_activation_scales_is_exit_2(tmp_path, cli):
    path = write(tmp_path, knob("scales", "mapping.activation_scales", '["channel", "row"]'))
    code, _, err = cli("sweep", path, "--db", tmp_path / "r.db", "--no-progress")
    assert code == 2 and "mapping.activation_scales" in err and "row" in err and "'channel'" in err, err


def test_bad_calibration_is_exit_2(tmp_path, cli):
    path = write(tmp_path, knob("calibration", "mapping.calibration", '["absmax", "kl"]'))
    code, _, err = cli("sweep", path, "--db", tmp_path / "r.db", "--no-progress")
    assert code == 2 and "space[0] (calibration) -> mapping.calibration" in err and "kl" in err and "'mse'" in err
