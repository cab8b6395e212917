"""Start-up: a command that only reads the store imports neither torch nor the emulator, and
the CLI imports only the module of the command it runs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from test_records_cli import fill

from dse.cli import COMMANDS, command_modules
from dse.records import Store

HEAVY = ("torch", "emulator", "dse.workload", "dse.runner.spec", "optuna")

# Runs the given CLI command lines in one fresh interpreter, then prints what it imported.
PROBE = """
import contextlib, io, json, sys
from dse.cli import main
codes = []
for argv in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            codes.append(main(argv))
        except SystemExit as exc:  # --help
            codes.append(exc.code)
print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
"""


def imported_by(argvs: list[list[str]], repo) -> tuple[list[int], set[str]]:
    env = {**os.environ, "PYTHONPATH": str(repo)}
    p = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argvs)], check=False, capture_output=True, text=True,
                       env=env, cwd=repo, timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return out["codes"], set(out["modules"])


# The emulator's formula language (numpy only) reads acceptance expressions; its package
# loads its names lazily, so importing it brings in no machine, chip or timing model; its Ball
# kinds (`emulator.ball_kinds`, plain data) name the cost components.
LIGHT = {"emulator", "emulator.formula", "emulator.ball_kinds"}


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules - LIGHT if any(m == h or m.startswith(h + ".") for h in HEAVY)}


def test_the_command_table_names_every_command_of_every_module():
    registered = {}
    for name in command_modules():
        import importlib

        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"dse.cli.{name}").register(sub)
        registered.update({command: name for command in sub.choices})
    assert registered == COMMANDS


def test_read_only_commands_import_neither_torch_nor_the_emulator(tmp_path, repo):
    db = str(tmp_path / "records.db")
    with Store(db) as store:
        ids = fill(store)
    out = str(tmp_path / "out")
    argvs = [
        ["--help"],
        ["history", "--db", db],
        ["history", "--decisions", "--db", db],
        ["show", "banks", "--db", db],
        ["show", f"c{ids['fast']}", "--db", db],
        ["show", f"r{ids['runs'][ids['fast']]}", "--db", db],
        ["compare", str(ids["base"]), str(ids["fast"]), "--db", db],
        ["export", "banks", "--format", "csv", "--out", out, "--db", db],
        ["report", "banks", "--out", out, "--db", db],
        ["report", "--history", "--out", out, "--db", db],
        ["lessons", "--db", db],
        ["lesson", "--list", "--db", db],
        ["recipe", "diff", out, out],
    ]
    codes, modules = imported_by(argvs, repo)
    assert codes == [0] * len(argvs)
    assert heavy(modules) == set()
    # the records commands ran, so the probe did load the store (the test can fail)
    assert "dse.records.store" in modules and "dse.cli.records" in modules


def test_a_command_imports_only_its_own_cli_module(tmp_path, repo):
    db = str(tmp_path / "records.db")
    with Store(db) as store:
        fill(store)
    codes, modules = imported_by([["history", "--db", db]], repo)
    assert codes == [0]
    assert {m for m in modules if m.startswith("dse.cli.")} == {"dse.cli.records", "dse.cli.common"}
    # ... while a command that reads chip configs does import the emulator's chip schema
    codes, modules = imported_by([["chips", "list"]], repo)
    assert codes == [0] and "emulator.chip" in modules and "dse.cli.records" not in modules


def test_dse_history_prints_without_pandas(tmp_path, repo):
    """`dse history` reads plain rows and prints them itself: pandas (most of a short
    command's start-up) is never imported, decisions and notes included; nor SQLAlchemy,
    on a SQLite store at the schema head (tests/test_light_reads.py has the rest)."""
    db = str(tmp_path / "records.db")
    with Store(db) as store:
        ids = fill(store)
        store.add_decision(ids["experiment"], "confirmed", "20 banks are faster", "ana", [], ids["fast"])
        store.add_note(ids["experiment"], "limitation", "one shape only", "ana")
    codes, modules = imported_by([["history", "--db", db], ["history", "--decisions", "--db", db]], repo)
    assert codes == [0, 0]
    assert "dse.cli.records" in modules and "dse.records.light" in modules  # it did read the store
    assert not {m for m in modules if m.partition(".")[0] in ("pandas", "sqlalchemy")}
