"""`dse emulate --knob KEY=VALUE` (#19): every mapping knob a spec can set, validated as the
spec's mapping is, and run as a sweep's emulator stage runs it. Each candidate of a real
sweep (placements with their hand-offs, auto, shared weights, a workload point, a
quantization granularity, fusion, channels-last) is emulated again by the CLI from its
recorded mapping: the same cycles, DMA bytes and shared bytes as the store holds, and the
notes the sweep recorded. Bad knobs are one line, exit 2, naming the field and the value."""

from __future__ import annotations

import json

import pytest

from dse.records import Store
from dse.runner import run_sweep

GEMM_SPEC = """
[experiment]
name = "emulate_knobs_gemm"
hypothesis = "the CLI emulates what the sweep emulated"

[[acceptance]]
expr = "numerics.integer_bit_exact == 1"
prose = "bit-exact"

[workload]
recipe = "gemm"
params = { m = 32, n = 64, k = 64 }

[baseline]
chip = "poly"
mapping = { workers = 3, split = "cols", requests = 2 }

[[candidates]]
why = "pipelined across the groups, the hand-off through shared memory"
set = { "mapping.placement" = "pipeline", "mapping.cuts" = [1] }

[[candidates]]
why = "the ranges one after another, through DRAM"
set = { "mapping.placement" = "layers", "mapping.cuts" = [1], "mapping.handoff" = "dram" }

[[candidates]]
why = "the model's pick"
set = { "mapping.placement" = "auto" }

[[candidates]]
why = "one shared copy of the weights"
set = { "mapping.weights" = "shared" }

[[candidates]]
why = "weights quantized per tensor"
set = { "mapping.quantization" = "tensor" }

# another workload point: the candidate's mapping.workload
[[space]]
name = "m"
target = "workload.params.m"
values = [16]

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"

[stages]
emulator = "all"
"""

BLOCK_SPEC = """
[experiment]
name = "emulate_knobs_block"
hypothesis = "the CLI emulates what the sweep emulated"

[[acceptance]]
expr = "numerics.integer_bit_exact == 1"
prose = "bit-exact"

[workload]
recipe = "resnet_block"
params = { channels = 8, size = 4 }

[baseline]
chip = "goban"
mapping = { workers = 2 }

[[candidates]]
why = "fused, channels-last"
set = { "mapping.fusion" = "fuse", "mapping.channels_last" = true }

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"

[stages]
emulator = "all"
"""


STAGED_SPEC = """
[experiment]
name = "emulate_knobs_stages"
hypothesis = "the CLI emulates what the sweep emulated"

[[acceptance]]
expr = "numerics.integer_bit_exact == 1"
prose = "bit-exact"

[workload]
recipe = "llama_prefill"
params = { vocab = 64, dim = 32, layers = 1, heads = 2, kv_heads = 1, seq = 8 }
role = "prefill"

[[workload.stages]]
role = "decode"
recipe = "llama_decode"
params = { vocab = 64, dim = 32, layers = 1, heads = 2, kv_heads = 1, past = 7 }

[baseline]
chip = "poly"
mapping = { workers = 3, split = "cols" }

[[candidates]]
why = "each phase on its group"
set = { "mapping.placement" = "phase" }

[[candidates]]
why = "the model's pick of SPMD and phase"
set = { "mapping.placement" = "auto" }

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"

[stages]
emulator = "all"
"""
# the stages' parameters as --param gives them: each to every stage whose recipe takes it
STAGED_PARAMS = dict(vocab=64, dim=32, layers=1, heads=2, kv_heads=1, seq=8, past=7)
STAGED_ARGS = ["--role", "prefill", "--stage", "decode=llama_decode"]


def toml_value(v) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)  # ints, strings, booleans and lists read alike in TOML


def swept(tmp_path, spec: str):
    """The spec swept into a fresh store: per candidate, its mapping, emulator totals and notes."""
    path = tmp_path / "spec.toml"
    path.write_text(spec)
    result = run_sweep(path, tmp_path / "r.db", progress=False)
    with Store(tmp_path / "r.db") as store:
        cands = store.candidates(result.experiment_id)
        emulated = store.metric_table(result.experiment_id, "emulator_cycles").set_index("hash")
        numerics = store.metric_table(result.experiment_id, "numerics").set_index("hash")
        notes = dict(zip(cands["hash"], cands["notes"].fillna("")))
    return [(json.loads(m) if isinstance(m, str) else m, {**emulated.loc[h], **numerics.loc[h]}, notes[h])
            for h, m in zip(cands["hash"], cands["mapping"])]


def emulated_by_cli(cli, chip: str, recipe: str, params: dict, mapping: dict, extra=()):
    args = ["emulate", "--chip", chip, "--recipe", recipe, "--json", *extra]
    for k, v in params.items():
        args += ["--param", f"{k}={v}"]
    for k, v in mapping.items():
        args += ["--knob", f"{k}={toml_value(v)}"]
    code, out, err = cli(*args)
    assert code == 0, (mapping, out, err)
    return json.loads(out)


@pytest.mark.parametrize("spec, chip, recipe, params, extra", [
    (GEMM_SPEC, "poly", "gemm", dict(m=32, n=64, k=64), []),
    (BLOCK_SPEC, "goban", "resnet_block", dict(channels=8, size=4), []),
    (STAGED_SPEC, "poly", "llama_prefill", STAGED_PARAMS, STAGED_ARGS),
], ids=["gemm-placements", "resnet-fusion-layout", "llama-phases"])
def test_the_cli_emulates_every_swept_candidate_to_the_cycle(cli, tmp_path, spec, chip, recipe, params, extra):
    rows = swept(tmp_path, spec)
    assert len(rows) >= spec.count("[[candidates]]") + 1
    for mapping, emulated, notes in rows:
        d = emulated_by_cli(cli, chip, recipe, params, mapping, extra)
        assert d["numerics"]["passed"] and d["numerics"]["integer_bit_exact"], mapping
        c = d["counters"]
        assert d["cycles"] == emulated["latency_cycles"], mapping
        assert sum(c["dma_bytes_in"]) + sum(c["dma_bytes_out"]) == emulated["dma_bytes"], mapping
        assert c["shared_bytes_used"] == emulated["shared_sram_bytes"], mapping
        assert d["peak_sram_bytes"] == emulated["peak_sram_bytes"], mapping
        # the same outputs: the same error against the float model (a granularity, a point)
        assert d["numerics"]["max_abs_error"] == pytest.approx(emulated["max_abs_error"], rel=1e-6), mapping
        # the sweep's notes (the model's words) are the CLI's (the lowering's)
        assert "; ".join(d["notes"]) == notes, mapping
        if mapping.get("placement") == "auto":
            assert d["notes"][0].startswith("placement auto picked ") and d["mapping"]["placement"] != "auto"
    if "[[space]]" in spec:  # a granularity and a workload point: graphs other than the baseline's
        error = {key: next(e["max_abs_error"] for m, e, _ in rows if key in m) for key in ("quantization", "workload")}
        assert rows[0][1]["max_abs_error"] not in error.values() and len(set(error.values())) == 2, error


def test_a_workload_knob_is_spelt_as_the_specs_target_or_as_the_mapping_field(cli):
    runs = [cli("emulate", "--chip", "toy", "--recipe", "gemm", "--param", "n=16", "--param", "k=16", "--json", *knob)
            for knob in (["--knob", "workload.params.m=16"], ["--knob", "workload={m = 16}"], ["--param", "m=16"], [])]
    assert all(code == 0 for code, _, _ in runs), runs
    reports = [json.loads(out) for _, out, _ in runs]
    assert reports[0]["mapping"]["workload"] == {"m": 16} == reports[1]["mapping"]["workload"]
    assert reports[0]["cycles"] == reports[1]["cycles"] == reports[2]["cycles"] != reports[3]["cycles"]  # m = 64


def test_the_text_report_names_cycles_bytes_and_notes(cli):
    code, out, err = cli("emulate", "--chip", "poly", "--recipe", "gemm", "--param", "m=32", "--param", "n=64",
                         "--param", "k=64", "--split", "cols", "--knob", "placement=layers", "--knob", "cuts=[1]")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == ('recipe gemm on poly: policy = "search", dataflow = "ws", workers = 1, split = "cols", '
                        'double_buffer = true, placement = "layers", cuts = [1]')
    # by hand (tests/test_pipeline.py): quantize 32*64*4 + 32*64, the hand-off 2*16*64, per
    # decode core its B tile and 2 accumulator tiles
    assert "DMA bytes             24,576 (" in out
    assert f"shared memory used    {2 * 16384 * 16:,} B, 0 channel conflicts" in out
    assert "note: x_int8 to op matmul_acc's A via shared memory: 2048 bytes" in out
    assert "bit-exact" in out


@pytest.mark.parametrize("argv, field, shown, allowed", [
    (["--knob", "placement=everywhere"], "mapping.placement", "'everywhere'",
     "'phase', 'layers', 'pipeline' or 'auto'"),
    (["--knob", "channels_last=yes"], "mapping.channels_last", "'yes'", "a valid boolean"),
    (["--knob", "placement=layers"], "mapping.cuts", "None", "placement = layers with cuts"),
    (["--knob", "cuts=[2, 1]", "--knob", "placement=layers"], "mapping.cuts", "[2, 1]", "increasing order"),
    (["--knob", "colour=red"], "mapping.colour", "'red'", "known keys: "),
    (["--knob", "placement"], "placement", "'placement'", "KEY=VALUE, e.g. placement=pipeline"),
    (["--knob", "fusion=fuse", "--partition", "spans"], "mapping.fusion", "'fuse'", "partition = tiles"),
    (["--knob", "workers=3", "--workers", "2"], "mapping.workers", "3", "one value of mapping.workers"),
    (["--knob", "workers=9"], "mapping.workers", "9", "1..5 (cores of the chip)"),
    (["--knob", "quantization=channel", *STAGED_ARGS], "mapping.quantization", "'channel'", "unset with --stage"),
], ids=["placement", "boolean", "cuts-missing", "cuts-order", "unknown", "no-equals", "spans-fusion", "twice",
        "too-many-workers", "stages-quantization"])
def test_a_bad_knob_is_one_line_exit_2(cli, argv, field, shown, allowed):
    code, out, err = cli("emulate", "--chip", "poly", "--recipe", "gemm", *argv)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("dse: error: --knob: ") and f"field '{field}'" in line and f"got {shown}" in line, line
    assert allowed in line, line


@pytest.mark.parametrize("argv, source, field, allowed", [
    (["--stage", "decode", "--role", "prefill"], "--stage", "--stage", "ROLE=RECIPE"),
    (["--stage", "prefill=llama_decode", "--role", "prefill"], "--stage", "--stage", "a role no other stage has"),
    (["--stage", "decode=llama_decode"], "(command line)", "--role", "the role of --recipe's stage"),
    (["--role", "prefill"], "(command line)", "--role", "a role only beside --stage"),
    ([*STAGED_ARGS, "--param", "colour=1"], "--param", "colour", "a parameter of at least one stage's recipe"),
], ids=["no-equals", "same-role", "no-role", "role-alone", "unknown-param"])
def test_a_bad_stage_is_one_line_exit_2(cli, argv, source, field, allowed):
    code, out, err = cli("emulate", "--chip", "poly", "--recipe", "llama_prefill", *argv)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"dse: error: {source}: field '{field}'") and allowed in line, line


def test_a_granularity_no_quantize_step_offers_is_one_line_exit_2(cli, tmp_path):
    # a user's model folder whose steps do not quantize: no granularity to set
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "model.py").write_text(PLAIN_MODEL)
    (folder / "steps.toml").write_text('[[step]]\nname = "permute"\n')
    code, out, err = cli("emulate", "--chip", "poly", "--recipe", folder, "--knob", "quantization=channel")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert "field 'mapping.quantization'" in line and "got 'channel'" in line, line
    assert "a recipe with a quantize step" in line, line


PLAIN_MODEL = '''import torch
from torch import nn


def load() -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.Linear(16, 16).eval()


def inputs():
    return (torch.randn(4, 16, generator=torch.Generator().manual_seed(1)),)
'''
