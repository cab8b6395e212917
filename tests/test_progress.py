"""Progress on long commands: a bar on a terminal, nothing when stderr is not one."""

from __future__ import annotations

import os
import re
import pty
import subprocess
import sys

from test_frontend import user_recipe
from test_records_cli import fill

from dse.records import Store


def test_recipe_check_shows_progress_on_a_terminal_only(tmp_path, repo, run_cli):
    folder = user_recipe(tmp_path / "mine")
    code, out, err = run_cli("recipe", "check", folder, "--no-dump")
    assert code == 0 and "passed" in out and err == ""  # stderr is a pipe: quiet
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(repo), "DSE_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "dse", "recipe", "check", str(folder), "--no-dump"], cwd=repo,
                       env=env, stdout=subprocess.PIPE, stderr=slave, timeout=300, check=False)
    os.close(slave)
    shown = b""
    try:
        while chunk := os.read(master, 65536):
            shown += chunk
    except OSError:  # the terminal's other end is closed: all read
        pass
    os.close(master)
    assert p.returncode == 0
    assert b"mine: capture + check" in shown and b"stage" in shown
    assert bars_end_full(shown) == 1


def on_terminal(argv: list[str], repo, tmp_path) -> tuple[int, bytes]:
    """`dse ARGV` with stderr on a pseudo-terminal: its exit code and what the terminal showed."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(repo), "DSE_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.run([sys.executable, "-m", "dse", *map(str, argv)], cwd=repo, env=env, stdout=subprocess.PIPE,
                       stderr=slave, timeout=300, check=False)
    os.close(slave)
    shown = b""
    try:
        while chunk := os.read(master, 65536):
            shown += chunk
    except OSError:  # the terminal's other end is closed: all read
        pass
    os.close(master)
    return p.returncode, shown


def bars_end_full(shown: bytes) -> int:
    """How many bars the terminal showed, each checked to end drawn at its total (then left
    or cleared): a bar starts at 0/N after a frame past 0, and its last frame is N/N."""
    frames = [(int(n), int(total)) for n, total in re.findall(rb"(\d+)/(\d+) \[", shown)]
    bars: list[list[tuple[int, int]]] = []
    for n, total in frames:
        if not bars or (n == 0 and bars[-1][-1][0] > 0):  # (a bar's description may change at 0 too)
            bars.append([])
        bars[-1].append((n, total))
    for bar in bars:
        assert bar[-1][0] == bar[-1][1], f"a bar ended at {bar[-1][0]}/{bar[-1][1]}: {bar}"
    return len(bars)


def test_report_shows_its_phases_on_a_terminal(tmp_path, repo):
    # (quiet off a terminal as recipe check above: tqdm's disable=None, one rule)
    db = tmp_path / "records.db"
    with Store(db) as store:
        fill(store)
    code, shown = on_terminal(["report", "banks", "--out", tmp_path / "shown", "--db", db], repo, tmp_path)
    assert code == 0 and b"report banks: figures" in shown and b"phase" in shown
    assert bars_end_full(shown) == 1


def test_emulate_shows_its_phases_on_a_terminal(tmp_path, repo):
    # (quiet off a terminal likewise)
    folder = user_recipe(tmp_path / "mine")
    code, shown = on_terminal(["emulate", "--chip", "goban", "--recipe", folder], repo, tmp_path)
    assert code == 0 and b"mine: emulate" in shown and b"mine: compare" in shown
    assert bars_end_full(shown) == 2  # the recipe's stages, then the emulation's phases


# A real small sweep whose first estimate of its total is wrong three ways: the baseline is
# also a grid point (8 grid points, 8 candidates, not 9), 4 of them are infeasible, and the
# emulator stage emulates the best one and records the others as pruned.
SWEEP = """
[experiment]
name = "progress"
hypothesis = "Four workers beat one"
[[acceptance]]
expr = "latency_cycles < 0.8 * baseline_latency_cycles"
[workload]
recipe = "mlp"
[baseline]
chip = "goban"
mapping = { policy = "framework", double_buffer = false, workers = 1 }
[[space]]
name = "bank_count"
target = "chip.banks.count"
values = [4, 20]
[[space]]
name = "bank_rows"
target = "chip.banks.rows"
values = [128, 1024]
[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 4]
[[objectives]]
metric = "latency_cycles"
[search]
sampler = "grid"
"""
EMULATE_BEST = '[stages]\nemulator = "top_k"\ntop_k = 1\nhost_time_repeats = 1\n'


def last_frame(shown: bytes) -> str:
    """The bar as the terminal shows it last (tqdm redraws it after each carriage return)."""
    frames = [f.strip() for f in shown.decode(errors="replace").replace("\n", "\r").split("\r") if f.strip()]
    return [f for f in frames if f.startswith("progress")][-1]


def test_the_sweep_bar_ends_at_its_total(tmp_path, repo):
    spec, db = tmp_path / "progress.toml", tmp_path / "records.db"
    spec.write_text(SWEEP + EMULATE_BEST)
    code, shown = on_terminal(["sweep", spec, "--db", db], repo, tmp_path)
    assert code == 0, shown.decode(errors="replace")[-2000:]
    with Store(db) as store:
        cands = store.candidates("progress", stage="analytical")
        runs = store.runs("progress")
    emulated = runs[(runs["stage"] == "emulator") & (runs["status"] != "pruned")]
    assert len(cands) == 8 and (cands["status"] == "infeasible").sum() == 4 and len(emulated) == 1
    assert ((runs["stage"] == "emulator") & (runs["status"] == "pruned")).sum() == 7
    # every candidate once, then the one emulated: 9 of 9, where the first estimate said 9
    # of which only 8 were candidates (it stopped at 8/9 before)
    frame = last_frame(shown)
    assert re.search(r"\b100%.*\b9/9\b", frame), frame
    assert bars_end_full(shown) == 2  # the recipe's stages (capture and checked steps), then the sweep


NOTEBOOK_CELL = """
from dse.runner import run_sweep
result = run_sweep({spec!r}, {db!r})  # progress on: a tqdm.auto widget in a notebook
print(result.counts)
"""


def test_the_notebook_widget_ends_full_and_green(tmp_path, repo, monkeypatch):
    """tqdm.auto's widget in a real Jupyter kernel: its bar full (value == max) and green
    ("success") once the sweep ends; red ("danger") was a bar closed short of its total."""
    import nbformat
    from nbclient import NotebookClient

    spec, db = tmp_path / "progress.toml", tmp_path / "records.db"
    spec.write_text(SWEEP)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(NOTEBOOK_CELL.format(spec=str(spec), db=str(db)))])
    monkeypatch.setenv("PYTHONPATH", str(repo))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    assert not [o for o in outputs if o.get("output_type") == "error"], outputs
    assert "'infeasible': 4" in "".join(o.get("text", "") for o in outputs)
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    bars = [w["state"] for w in state.values() if w["model_name"] in ("FloatProgressModel", "IntProgressModel")]
    # Every bar full: the frontend's (hidden once done, leave=False) and the sweep's, kept green.
    assert all(b["value"] == b["max"] and b["bar_style"] != "danger" for b in bars), bars
    assert [(b["value"], b["max"]) for b in bars if b["bar_style"] == "success"] == [(8, 8)]
