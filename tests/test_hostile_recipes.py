"""Recipe code is user code: a recipe whose import or `load()` calls `sys.exit(0)`, or
whose `load()` never returns, is one line naming the recipe (exit 2) and nothing is
recorded; while it runs past `[stages] progress_interval_s`, a line says it still runs."""

from __future__ import annotations

import importlib.machinery
import shutil
import sys
import time
import types
from pathlib import Path

import pytest

from test_runner import write_spec

from dse.runner.limits import time_limit

REPO = Path(__file__).resolve().parents[1]


def hostile_recipe(tmp_path: Path, name: str, edit) -> Path:
    folder = tmp_path / name
    shutil.copytree(REPO / "recipes" / "gemm", folder, ignore=shutil.ignore_patterns("__pycache__"))
    model = folder / "model.py"
    model.write_text(edit(model.read_text()))
    return folder


def sweep_of(tmp_path: Path, recipe: Path, stages: str = "") -> tuple[Path, Path]:
    spec = write_spec(tmp_path, name=recipe.name, extra=f"\n[stages]\n{stages}\n")
    spec.write_text(spec.read_text().replace('recipe = "gemm"', f'recipe = "{recipe}"'))
    return spec, tmp_path / "r.db"


EXIT_IN_IMPORT = lambda text: "import sys\nsys.exit(0)\n" + text  # noqa: E731
EXIT_IN_LOAD = lambda text: text.replace("    model = Gemm(k, n)\n", "    import sys\n    sys.exit(0)\n")  # noqa: E731


@pytest.mark.parametrize("edit, field, value", [
    (EXIT_IN_IMPORT, "workload.recipe", "import called sys.exit(0)"),
    (EXIT_IN_LOAD, "workload.params (recipe exit-in-load: load(**workload.params))", "it called sys.exit(0)"),
], ids=["import", "load"])
def test_sys_exit_in_recipe_code_is_one_line_and_nothing_recorded(cli, tmp_path, edit, field, value):
    recipe = hostile_recipe(tmp_path, "exit-in-" + ("import" if edit is EXIT_IN_IMPORT else "load"), edit)
    spec, db = sweep_of(tmp_path, recipe)
    code, out, err = cli("sweep", spec, "--db", db, "--no-progress")
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dse: error: ") and "Traceback" not in err, err
    assert f"field '{field}'" in lines[0] and value in lines[0], lines[0]
    assert not db.exists()


def test_a_load_that_never_returns_is_stopped_at_the_capture_limit_saying_it_runs(cli, tmp_path):
    recipe = hostile_recipe(tmp_path, "never", lambda text: text.replace(
        "    model = Gemm(k, n)\n", "    import time\n    time.sleep(3600)\n    model = Gemm(k, n)\n"))
    spec, db = sweep_of(tmp_path, recipe, "capture_timeout_s = 3\nprogress_interval_s = 1")
    started = time.monotonic()
    code, out, err = cli("sweep", spec, "--db", db, "--no-progress")
    took = time.monotonic() - started
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    # spec checking calls load(): it is under the limit, and says it still runs, with the time so far
    running = [line for line in lines if "still running" in line]
    assert running[0] == ("dse: checking recipe '" + str(recipe) + "' (its import, load() and inputs()) still "
                          "running (1 s so far; stopped at 3 s: [stages] capture_timeout_s)"), running
    assert len(running) >= 2 and all(" s so far" in line for line in running)
    assert lines[-1].startswith("dse: error: ") and "field 'stages.capture_timeout_s': got 3.0" in lines[-1]
    assert len(lines) == len(running) + 1 and "Traceback" not in err, err
    assert 3 <= took < 20, took
    assert not db.exists()


def test_a_limit_passing_inside_torchs_import_is_raised_once_the_import_is_over(monkeypatch):
    """The recipe's import imports torch, seconds of it on a loaded machine: an exception
    raised inside torch's import can abort the process (pybind11) or leave torch half
    imported, broken for every later import in it (a notebook's kernel; a test worker whose
    next sweep failed "partially initialized module 'torch'"). The limit waits for it."""
    importing = types.ModuleType("torch._dse_test_importing")
    importing.__spec__ = importlib.machinery.ModuleSpec(importing.__name__, None)
    importing.__spec__._initializing = True  # as importlib marks a module while it runs
    monkeypatch.setitem(sys.modules, importing.__name__, importing)
    seen = []
    with pytest.raises(TimeoutError, match="the limit"):
        with time_limit(0.05, lambda: TimeoutError("the limit")):
            time.sleep(0.3)  # still importing, past the limit
            seen.append("import over")
            importing.__spec__._initializing = False
            time.sleep(10)
            seen.append("not stopped")
    assert seen == ["import over"]
