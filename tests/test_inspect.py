"""Look inside a candidate (the design guides' rows): `dse map`'s stated buffering agrees
with the plan a sweep's candidate is lowered with; `dse recipe show --after` lists the
lowering's temporaries; `dse show c<ID> --program / --banks` list the emitted program and
the bank lifetimes of the program the emulator ran."""

from __future__ import annotations

import json

import pytest

from dse.chips import load_chip
from dse.mapping import Mapping
from dse.plan.matmul import plan_matmul
from dse.plan.mapper import gemm_shape

# the goban geometry of the bank_geometry_ppa sweep (8 banks of 512 rows), on one GEMM
GOBAN_8X512 = ("--chip", "goban", "--recipe", "gemm", "--params", "m=128", "n=1024", "k=256", "--set", "banks.count=8",
               "--set", "banks.rows=512")


def test_map_states_its_buffering_and_agrees_with_the_plan_a_sweep_uses(cli):
    code, out, _ = cli("map", *GOBAN_8X512)  # default: double buffering, 2 x (A 1 + B 1 + C 4) = 12 > 8 banks
    assert code == 3
    assert "assumes double buffering: 2 buffers per operand" in out and "needs 12 banks" in out
    code, out, _ = cli("map", *GOBAN_8X512, "--buffering", "single", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["assumes"].startswith("single buffering: 1 buffer per operand")
    assert got["mapping"]["double_buffer"] is False
    # the very tile a sweep's single-buffered candidate is planned with (`plan_matmul`)
    from dse.frontend import run_pipeline

    graph = run_pipeline("gemm", dict(m=128, n=1024, k=256), check=False).graph
    chip = load_chip("goban", {"banks.count": 8, "banks.rows": 512})
    by_op = {op.name: op for op in graph.ops}
    for row in got["ops"]:
        plan = plan_matmul(chip, Mapping(policy="search", double_buffer=False), gemm_shape(graph, by_op[row["op"]]))
        assert plan.feasible and (row["best"]["tm"], row["best"]["tn"], row["best"]["tk"]) == (plan.tm, plan.tn, plan.tk)
        assert plan_matmul(chip, Mapping(policy="search"), gemm_shape(graph, by_op[row["op"]])).feasible is False
    code, _, err = cli("map", *GOBAN_8X512, "--buffering", "triple")
    assert code == 2 and "--buffering" in err and "single, double" in err


def test_recipe_show_after_quantize_lists_pad_and_im2col_temporaries_with_their_bytes(cli):
    args = ("recipe", "show", "resnet_block", "--after", "quantize", "--param", "channels=16", "--param", "size=8")
    code, out, _ = cli(*args)
    assert code == 0
    # conv 3x3, padding 1, 16 channels at 8x8: the padded image 1x10x10x16 int8 in a buffer
    # whose last two dims pad to 16 (1*10*16*16 B); im2col's A is 64 positions x 144 taps*C
    assert "conv2d_acc    pad         of x_cl_int8: int8[1x10x10x16]  2,560 B" in out
    assert "conv2d_acc    im2col      of x_cl_int8: int8[64x144]  9,216 B" in out
    assert "lowering temporaries: 4 buffer(s), 23,552 bytes" in out
    code, out, _ = cli(*args, "--json")
    got = json.loads(out)
    temps = [(t["op"], t["kind"], t["bytes"]) for t in got["temporaries"]]
    assert temps == [("conv2d_acc", "pad", 2560), ("conv2d_acc", "im2col", 9216),
                     ("conv2d_1_acc", "pad", 2560), ("conv2d_1_acc", "im2col", 9216)]
    assert {o["name"]: o["temp_bytes"] for o in got["ops"]}["conv2d_acc"] == 2560 + 9216


# A small GEMM whose output (20 x 24) is padded in DRAM (32 x 32): swept with its emulator
# stage, on one worker (the baseline, c1) and two (c2).
SPEC = """
[experiment]
name = "inside"
hypothesis = "Two workers beat one on a small GEMM"

[[acceptance]]
expr = "latency_cycles < baseline_latency_cycles"

[workload]
recipe = "gemm"
params = { m = 20, n = 24, k = 40 }

[baseline]
chip = "goban"
mapping = { workers = 1 }

[[candidates]]
why = "two workers"
set = { "mapping.workers" = 2 }

[[objectives]]
metric = "latency_cycles"

[stages]
emulator = "top_k"
top_k = 2
host_time_repeats = 1
ppa = false
"""


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(db, {candidate id: its emulator run id}): the sweep, recorded once for the module."""
    from dse.records import Store
    from dse.runner import run_sweep

    folder = tmp_path_factory.mktemp("inside")
    (folder / "inside.toml").write_text(SPEC)
    db = str(folder / "r.db")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DSE_CACHE_DIR", str(folder / "graph-cache"))
        run_sweep(folder / "inside.toml", db, progress=False)
    with Store(db) as store:
        runs = store.runs("inside")
    emulated = runs[(runs["stage"] == "emulator") & (runs["status"] == "ok")]
    return db, dict(zip(emulated["candidate_id"].astype(int), emulated["id"].astype(int))), folder


def _artifact(db: str, run: int, name: str) -> bytes:
    from dse.records import Store

    with Store(db) as store:
        row = next(a for a in store.artifact_rows(run=run) if a["name"] == name)
        return store.artifact_path(row["sha256"]).read_bytes()


def test_show_program_lists_per_core_the_program_the_emulator_ran(cli, swept, monkeypatch):
    db, emulator_runs, folder = swept
    monkeypatch.setenv("DSE_CACHE_DIR", str(folder / "graph-cache"))
    recorded = json.loads(_artifact(db, emulator_runs[2], "replay.json"))
    log = json.loads(_artifact(db, emulator_runs[2], "emulation.json"))
    code, out, err = cli("show", "c2", "--program", "--db", db)
    assert code == 0, err
    lines = out.splitlines()
    assert f"program sha256 {recorded['digests']['program_sha256']}" in lines[0]
    assert lines[1] == f"the program emulator run r{emulator_runs[2]} ran (its recorded sha256)"
    # per core: the accelerator instructions the emulator counted on it, and its core ops, each
    # with the op that emitted it
    headers = [i for i, line in enumerate(lines) if line.startswith("core ")]
    assert len(headers) == len(log["counters"]["instructions"]) == 2
    for core, (counted, at) in enumerate(zip(log["counters"]["instructions"], headers)):
        n = int(lines[at].split()[2])
        assert lines[at] == f"core {core}: {n} instruction(s)"
        body = lines[at + 1:at + 1 + n]
        assert [int(line.split()[0]) for line in body] == list(range(n))
        assert sum(" CORE " not in line for line in body) == counted
        assert {line.split()[1] for line in body} <= {"x_int8", "matmul_acc", "matmul", "(sync)"}
        assert sum("MATMUL(" in line for line in body) > 0 and all(" matmul_acc " in line for line in body
                                                                     if "MATMUL(" in line)
    code, _, err = cli("show", "inside", "--program", "--db", db)
    assert code == 2 and "a candidate (c<ID>) with --program" in err


def test_bank_lifetimes_agree_in_the_cli_the_ui_and_the_report(cli, swept, monkeypatch, tmp_path):
    import urllib.request

    from uiserver import dse_ui_thread

    from dse.records import Store
    from dse.report import write_report

    db, emulator_runs, folder = swept
    monkeypatch.setenv("DSE_CACHE_DIR", str(folder / "graph-cache"))
    stored = json.loads(_artifact(db, emulator_runs[2], "banks.json"))
    # two workers, each: 2 A, 2 B (one bank each) and 2 accumulator buffers (4 banks each), double buffered
    assert sorted((r["core"], r["bank"], r["banks"]) for r in stored) == \
        [(c, b, 4 if b >= 4 else 1) for c in (0, 1) for b in range(6)]
    holds = {r["bank"]: r["holds"] for r in stored if r["core"] == 0}
    assert holds[0] == "in x_int8" and holds[2] == "in p_w_int8: Bt tiles" and holds[4] == "out matmul_acc"
    # the CLI: the same rows, emitted again
    code, out, err = cli("show", "c2", "--banks", "--db", db)
    assert code == 0, err
    import re

    row = re.compile(r"  bank\s+(\d+) x(\d+)\s+\[[ #]+\]\s+pc\s+(\d+)-(\d+)\s+(\S+)\s+(.+)")
    shown = [row.fullmatch(line).groups() for line in out.splitlines() if line.startswith("  bank")]
    assert shown == [(str(r["bank"]), str(r["banks"]), str(r["start"]), str(r["end"]), r["op"], r["holds"])
                     for r in stored]
    # the UI candidate page and its chart
    with dse_ui_thread(db) as base:
        page = urllib.request.urlopen(f"{base}/candidates/2", timeout=30).read().decode()
        fig = json.loads(urllib.request.urlopen(f"{base}/candidates/2/banks.json", timeout=30).read())
    assert f"{len(stored)} lifetime(s) recorded by emulator run" in page and 'id="banks-plot"' in page
    bars = sorted((y, b, b + x) for t in fig["data"] for y, b, x in zip(t["y"], t["base"], t["x"]))
    assert bars == sorted((f"core {r['core']} bank {r['bank']}", r["start"], r["end"]) for r in stored)
    assert fig["summary"] == {"run_id": emulator_runs[2], "lifetimes": len(stored), "cores": 2}
    # the report: the best candidate's (c2, two workers)
    with Store(db) as store:
        report = write_report(store, "inside", tmp_path / "report")
    page = report.path.read_text()
    assert f"Candidate 2, {len(stored)} lifetime(s) as emulator run r{emulator_runs[2]} recorded them" in page


def test_replay_reproduces_bit_for_bit_and_names_what_differs(cli, swept, monkeypatch, tmp_path):
    import io
    import shutil

    import numpy as np

    from dse.records import Store

    db, emulator_runs, folder = swept
    monkeypatch.setenv("DSE_CACHE_DIR", str(folder / "graph-cache"))
    run = emulator_runs[1]
    # kept at the model's shapes; the padded buffer only as labelled extra evidence
    out = np.load(io.BytesIO(_artifact(db, run, "outputs/matmul.npy")))
    physical = np.load(io.BytesIO(_artifact(db, run, "physical/matmul.padded.npy")))
    x = np.load(io.BytesIO(_artifact(db, run, "inputs/x.npy")))
    assert out.shape == (20, 24) and physical.shape == (1, 32, 32) and x.shape == (20, 40)
    assert np.array_equal(physical[0, :20, :24], out)
    code, text, err = cli("replay", f"r{run}", "--db", db)
    assert code == 0, err
    assert text.startswith(f"run {run}: reproduced bit for bit (1 output(s)")
    assert text.count("(equal)") == 3
    # the same run on a changed input: its DRAM image and its output differ, its program and weights do not
    copy = tmp_path / "copy.db"
    shutil.copy(db, copy)
    shutil.copytree(db + ".evidence", str(copy) + ".evidence")
    with Store(str(copy)) as store:
        row = next(a for a in store.artifact_rows(run=run) if a["name"] == "inputs/x.npy")
        path = store.artifact_path(row["sha256"])
    buffer = io.BytesIO()
    np.save(buffer, x + np.float32(0.5))
    path.write_bytes(buffer.getvalue())
    code, text, _ = cli("replay", f"r{run}", "--db", copy, "--json")
    got = json.loads(text)
    assert code == 1 and got["reproduced"] is False
    assert got["differing"] == ["dram_image_sha256", "output matmul"]
    assert got["digests"]["program_sha256"] == got["recorded"]["program_sha256"]
    # a run that kept no inputs (the analytical stage's): one line, exit 2
    with Store(db) as store:
        runs = store.runs("inside")
    analytical = int(runs[runs["stage"] == "analytical"]["id"].iloc[0])
    code, text, err = cli("replay", f"r{analytical}", "--db", db)
    assert code == 2 and text == "" and len(err.strip().splitlines()) == 1 and "stored none" in err
