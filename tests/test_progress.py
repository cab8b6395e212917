"""Progress on long commands: a bar on a terminal, nothing when stderr is not one."""

from __future__ import annotations

import os
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


def test_report_shows_its_phases_on_a_terminal(tmp_path, repo):
    # (quiet off a terminal as recipe check above: tqdm's disable=None, one rule)
    db = tmp_path / "records.db"
    with Store(db) as store:
        fill(store)
    code, shown = on_terminal(["report", "banks", "--out", tmp_path / "shown", "--db", db], repo, tmp_path)
    assert code == 0 and b"report banks: figures" in shown and b"phase" in shown


def test_emulate_shows_its_phases_on_a_terminal(tmp_path, repo):
    # (quiet off a terminal likewise)
    folder = user_recipe(tmp_path / "mine")
    code, shown = on_terminal(["emulate", "--chip", "goban", "--recipe", folder], repo, tmp_path)
    assert code == 0 and b"mine: emulate" in shown and b"mine: compare" in shown
