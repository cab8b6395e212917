"""The CLI's edge (`dse.cli.main`): every way a command can end is an exit code and at most
one line on stderr, never a traceback; with --json an error is also a JSON object on stdout."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DSE = [sys.executable, "-m", "dse"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def one_clean_line(err: str) -> None:
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err, err


def test_internal_error_is_one_line_and_a_traceback_file(cli, monkeypatch):
    import dse.cli.chips as chips_cli

    def boom(args):
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(chips_cli, "cmd_chips", boom)
    code, out, err = cli("chips", "list")
    assert code == 1 and out == ""
    one_clean_line(err)
    assert "internal error: RuntimeError: a bug over two lines" in err
    path = err.split("full traceback in ")[1].split(";")[0]
    text = Path(path).read_text()
    assert "Traceback" in text and "a bug" in text and "boom" in text
    Path(path).unlink()


def test_internal_error_with_json_is_a_json_object(cli, monkeypatch):
    import dse.cli.emulate_matmul as emu_cli

    monkeypatch.setattr(emu_cli, "cmd_emulate", lambda args: 1 / 0)
    code, out, err = cli("emulate-matmul", "--json")
    assert code == 1
    one_clean_line(err)
    obj = json.loads(out)["error"]
    assert obj["internal"] is True and "ZeroDivisionError" in obj["message"]
    Path(obj["traceback"].removeprefix("full traceback in ")).unlink()


def test_json_error_object_on_stdout(cli):
    code, out, err = cli("emulate-matmul", "--json", "--chip", "nope")
    assert code == 2
    one_clean_line(err)
    obj = json.loads(out)["error"]
    assert obj["field"] == "chip" and obj["value"] == "nope" and "goban" in obj["allowed"]
    assert set(obj) == {"file", "field", "value", "allowed", "message"}
    # a usage error too
    code, out, err = cli("emulate", "--json", "--mapping", "nonsense")
    assert code == 2
    one_clean_line(err)
    assert "--mapping" in json.loads(out)["error"]["message"]


@pytest.mark.parametrize("argv", [["chips", "bogus"], ["emulate-matmul", "--size", "1", "2"], [],
                                  ["sweep"], ["report", "--x"]])
def test_usage_errors_are_one_line(cli, argv):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    one_clean_line(err)
    assert err.startswith("dse: error: dse")


@pytest.mark.parametrize("content", [b"\xff\xfe", b"name = \"x\"\x00\x01\x02", b"\x80abc = 1", bytes(range(256))])
def test_binary_and_non_utf8_files_are_bad_input(cli, tmp_path, content):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(content)
    for argv in (["chips", "validate", bad], ["chips", "show", bad], ["sweep", bad, "--db", tmp_path / "s.db"]):
        code, out, err = cli(*argv)
        assert code == 2 and out == "", (argv, err)
        one_clean_line(err)
        assert str(bad) in err
    assert not (tmp_path / "s.db").exists()


def test_directory_and_unreadable_files_are_bad_input(cli, tmp_path, monkeypatch):
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    for argv in (["chips", "validate", folder], ["sweep", folder, "--db", tmp_path / "s.db"]):
        code, out, err = cli(*argv)
        assert code == 2
        one_clean_line(err)
        assert str(folder) in err
    # Permission denied (the tests may run as root, who reads anything: simulate it).
    locked = tmp_path / "locked.toml"
    locked.write_text('name = "x"\n')
    real = Path.read_bytes

    def read_bytes(self):
        if self.name == "locked.toml":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    for argv in (["chips", "validate", locked], ["sweep", locked, "--db", tmp_path / "s.db"]):
        code, out, err = cli(*argv)
        assert code == 2
        one_clean_line(err)
        assert str(locked) in err and "permission denied" in err
    assert not (tmp_path / "s.db").exists()


def test_closed_stdout_is_quiet():
    """`dse chips show goban | head -1`: the reader goes away; no traceback, exit 141."""
    p = subprocess.Popen([*DSE, "chips", "show", "goban"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    p.stdout.close()
    err = p.stderr.read().decode()
    p.stderr.close()
    assert p.wait(timeout=120) == 141
    assert err == ""
    shell = subprocess.run(f"{sys.executable} -m dse chips show goban | head -1", shell=True, capture_output=True,
                           text=True, env=ENV, timeout=120)
    assert shell.stdout == "{\n" and "Traceback" not in shell.stderr and "Error" not in shell.stderr


@pytest.mark.parametrize("delay", [0.3, 1.5])
def test_ctrl_c_during_start_up(tmp_path, delay, graph_cache_dir):
    """SIGINT before the sweep loop (imports, spec loading, the recipe's capture): 130, one
    line. The workload is resnet18 at its full 224x224 size, whose capture takes seconds
    (the quickstart's can be over before the signal on a fast machine), in this test's own
    empty graph cache (ENV predates it; a warm cache serves the capture at once)."""
    db = tmp_path / "s.db"
    spec = tmp_path / "slow_start.toml"
    spec.write_text((REPO / "experiments" / "quickstart.toml").read_text()
                    .replace('recipe = "mlp"', 'recipe = "resnet18"'))
    p = subprocess.Popen([*DSE, "sweep", spec, "--db", db, "--no-progress"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={**ENV, "DSE_CACHE_DIR": str(graph_cache_dir)}, text=True)
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    one_clean_line(err)
    assert "interrupted; rerun to resume" in err


INTERRUPTED_CLOSE = """
import sys
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from dse.cli import main

def interrupted(self, connection):  # a second Ctrl-C landing as the pool closes a connection
    connection.close()
    raise KeyboardInterrupt

SQLiteDialect_pysqlite.do_close = interrupted
sys.argv = ["dse", "compare", "c1", "c2", "--db", sys.argv[1]]
sys.exit(main())
"""


def test_ctrl_c_while_a_connection_closes_is_one_line(tmp_path):
    """A KeyboardInterrupt raised inside SQLAlchemy's pool as it closes a connection (the
    pool logs it with its traceback, then re-raises): 130, one line, no pool log."""
    from test_records_cli import fill

    from dse.records import Store

    db = tmp_path / "r.db"
    with Store(db) as store:
        fill(store)
    p = subprocess.run([sys.executable, "-c", INTERRUPTED_CLOSE, str(db)], capture_output=True, text=True,
                       env=ENV, timeout=120)
    assert p.returncode == 130, p.stderr
    one_clean_line(p.stderr)
    assert "interrupted; rerun to resume" in p.stderr and "Exception closing connection" not in p.stderr


def test_keyboard_interrupt_anywhere_is_130(cli, monkeypatch):
    import dse.cli.chips as chips_cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(chips_cli, "cmd_chips", interrupted)
    code, out, err = cli("chips", "list")
    assert code == 130
    one_clean_line(err)
    assert "interrupted; rerun to resume" in err


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    """A one-candidate experiment whose user text carries links, images and raw HTML."""
    from dse.runner import run_sweep
    from test_runner import write_spec

    tmp = tmp_path_factory.mktemp("store")
    spec = write_spec(tmp, name="links", banks="[20]")
    text = spec.read_text().replace(
        'hypothesis = "Two workers beat one for a 64^3 gemm on goban"',
        'hypothesis = "[click](javascript:alert(1)) ![](http://evil.example/track.png) <img src=x> '
        'www.evil.example https://evil.example/x *bold* `code` | pipe"\n'
        'limitations = "[a](https://x.example)"')
    spec.write_text(text.replace('values = [1, 2, 8]', 'values = [1]'))
    db = tmp / "r.db"
    run_sweep(spec, db, progress=False)
    return db


def test_report_out_must_be_a_folder(cli, small_store, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out, words in ((afile, "existing file"), ("/dev/null", "existing file"), ("/dev/null/x", "can be made")):
        for argv in (["report", "links"], ["report", "--history"]):
            code, stdout, err = cli(*argv, "--db", small_store, "--out", out)
            assert code == 2 and stdout == "", err
            one_clean_line(err)
            assert "'--out'" in err and words in err and str(out) in err
    assert afile.read_text() == "x"


def test_markdown_report_neutralises_links_images_and_html(cli, small_store, tmp_path):
    code, out, err = cli("report", "links", "--db", small_store, "--out", tmp_path / "rep")
    assert code == 0, err
    md = (tmp_path / "rep" / "links.md").read_text()
    hypothesis = md.split("## Hypothesis")[1].split("##")[0] if "## Hypothesis" in md else md
    assert "click" in hypothesis and "evil" in hypothesis
    # no live Markdown link or image, no raw HTML tag, no bare URL GitHub would link
    user = [line for line in md.splitlines() if "evil" in line or "x.example" in line]
    assert user
    for line in user:
        assert not re.search(r"(?<!\\)\]\(", line) and not re.search(r"(?<!\\)!\[", line), line
        assert "<img" not in line and "://" not in line and "www.evil" not in line, line
        assert not re.search(r"(?<!\\)\*bold(?<!\\)\*", line)
    # the figures the report itself links stay live
    assert re.search(r"!\[[^\]]*\]\(links_files/pareto\.png\)", md)


DEFERRED = """
import importlib.machinery, os, signal, sys, time, types
from dse.cli import _interrupt_outside_torch_imports
signal.signal(signal.SIGINT, _interrupt_outside_torch_imports)
torch = types.ModuleType("torch")
torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)
torch.__spec__._initializing = True  # as importlib marks a module while it runs
sys.modules["torch"] = torch
os.kill(os.getpid(), signal.SIGINT)
time.sleep(0.3)  # still "importing": the Ctrl-C waits
print("deferred", flush=True)
torch.__spec__._initializing = False
try:
    time.sleep(5)
except KeyboardInterrupt:
    print("raised after the import", flush=True)
"""


def test_a_ctrl_c_during_torchs_import_waits_for_it_to_end(repo):
    """A KeyboardInterrupt raised inside torch's import can abort the process from pybind11's
    C++ (SIGABRT); dse's handler sends the signal again until the import is over."""
    p = subprocess.run([sys.executable, "-c", DEFERRED], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["deferred", "raised after the import"]
