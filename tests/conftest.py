import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path, monkeypatch):
    """A new, empty store on each database: a SQLite file path, or a database of the real
    PostgreSQL server (tests/pg.py); the evidence under tmp_path either way. A test module
    may define its own `db`, which takes precedence."""
    monkeypatch.setenv("DSE_EVIDENCE_DIR", str(tmp_path / "evidence"))
    if request.param == "sqlite":
        return str(tmp_path / "records.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture(scope="session", autouse=True)
def _session_graph_cache(tmp_path_factory):
    """The graph cache of module- and session-scoped fixtures (set up before any test's own,
    below): a temporary folder too, never ~/.cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DSE_CACHE_DIR", str(tmp_path_factory.mktemp("session-graph-cache")))
        yield


@pytest.fixture(autouse=True)
def graph_cache_dir(tmp_path_factory, monkeypatch):
    """Every test its own, empty graph cache (never ~/.cache; no test sees another's
    graphs, made perhaps under a monkeypatch); subprocesses inherit it."""
    folder = tmp_path_factory.mktemp("graph-cache")
    monkeypatch.setenv("DSE_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def run_cli():
    """Run the real `dse` CLI in a subprocess: exit code, stdout, stderr."""
    import subprocess

    def run(*args, cwd=None):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        p = subprocess.run([sys.executable, "-m", "dse", *map(str, args)], capture_output=True, text=True,
                           cwd=cwd or REPO, env=env, timeout=300)
        return p.returncode, p.stdout, p.stderr

    return run


@pytest.fixture
def cli(capsys):
    """Run the CLI in this process (same code path as the `dse` entry point, without the
    seconds a fresh interpreter spends importing torch): exit code, stdout, stderr."""
    from dse.cli import main

    def run(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


def pytest_unconfigure(config):
    """If the interpreter has not exited two minutes after the last test (a thread or a
    child process that never ends), print every thread's stack and fail, rather than
    leave CI waiting until its time limit with no clue.

    Not in an xdist worker: its session ends as soon as no file is left to hand it, and it
    then idles until the controller ends the whole run, often more than two minutes later
    under load (the dump then cried hang over a healthy run); the controller kills a worker
    that does not exit within 10 s of being told to, and this hook runs in the controller."""
    import faulthandler

    if hasattr(config, "workerinput"):
        return
    faulthandler.dump_traceback_later(120, exit=True)
