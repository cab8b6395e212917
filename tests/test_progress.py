"""Progress on long commands: a bar on a terminal, nothing when stderr is not one."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

from test_frontend import user_recipe


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
