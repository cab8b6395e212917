"""Hard edges of the record store: a bad --db (or $DSE_DB) is one line and exit 2 from every
command, with nothing created. Property-based: hypothesis makes the broken files and URLs.

The bulk of the cases go through `dse.cli.main` in this process (the entry point's own code,
without a fresh interpreter's seconds of imports); a few representative ones run the real
`dse` executable, for the exit code and the stderr a user sees.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.cli import main
from dse.records import Store
from dse.records.sqlite_file import SQLITE_HEADER
from pg import pg_server, pg_url  # noqa: F401  (fixtures)

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "experiments" / "quickstart.toml"
DSE = Path(sys.executable).with_name("dse")
# Every command that opens the store, with arguments that would be fine for a good one.
COMMANDS = {
    "sweep": lambda out: ["sweep", str(SPEC), "--no-progress"],
    "history": lambda out: ["history"],
    "show": lambda out: ["show", "quickstart"],
    "report": lambda out: ["report", "quickstart", "--out", str(out / "reports")],
    "compare": lambda out: ["compare", "1", "2"],
    "decide": lambda out: ["decide", "quickstart", "--accept", "2", "--why", "faster"],
    "export": lambda out: ["export", "quickstart", "--out", str(out / "exports")],
}
TALLY: dict[str, int] = {"tried": 0, "clean": 0, "traceback": 0, "created": 0}
EXAMPLES = settings(max_examples=40, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> Path:
    """A real store file (schema at head, one experiment's worth of rows)."""
    db = tmp_path_factory.mktemp("good") / "good.db"
    with Store(db, heartbeat_interval=0) as store:
        eid = store.create_experiment("e", "h", [], "mlp", "w", "spec", "s")
        for i in range(40):
            cid, _ = store.add_candidate(eid, {"i": i, "pad": "x" * 200}, {"m": i}, "grid")
            run = store.start_run(cid, "analytical")
            store.finish_run(run, "ok", [{"kind": "analytical", "name": "latency_cycles", "value": float(i), "unit": "cycles"}])
    with sqlite3.connect(db) as connection:  # everything in the main file, no WAL beside it
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return db


def listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def run_in_process(args: list[str], env_db: str | None = None) -> tuple[int | None, str]:
    """`dse ARGS` through the entry point in this process: (exit code or None for an
    exception that escaped, stderr + traceback)."""
    err = io.StringIO()
    old = os.environ.get("DSE_DB")
    try:
        if env_db is not None:
            os.environ["DSE_DB"] = env_db
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(args)
    except BaseException as exc:  # noqa: BLE001 - what the user would see as a traceback
        import traceback

        return None, err.getvalue() + "".join(traceback.format_exception(exc))
    finally:
        if env_db is not None:
            if old is None:
                os.environ.pop("DSE_DB", None)
            else:
                os.environ["DSE_DB"] = old
    return code, err.getvalue()


def assert_refused(command: str, db: str, folder: Path, *fragments: str, via_env: bool = False) -> str:
    """`dse COMMAND --db DB` exits 2 with one line naming --db, and creates nothing."""
    before = listing(folder)
    args = COMMANDS[command](folder)
    code, err = run_in_process(args if via_env else args + ["--db", db], env_db=db if via_env else None)
    TALLY["tried"] += 1
    created = listing(folder) - before
    TALLY["traceback"] += "Traceback" in err
    TALLY["created"] += bool(created)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("dse: error: ") and "field '--db'" in lines[0], err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert not created, created
    TALLY["clean"] += 1
    return lines[0]


def fresh_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="dse-bad-store-"))


command_names = st.sampled_from(sorted(COMMANDS))


@EXAMPLES
@given(command=command_names, data=st.binary(min_size=1, max_size=4096).filter(lambda b: not b.startswith(b"SQLite")))
def test_a_file_that_is_not_sqlite(command, data):
    folder = fresh_folder()
    try:
        db = folder / "records.db"
        db.write_bytes(data)
        assert_refused(command, str(db), folder, "not a SQLite database")
        assert db.read_bytes() == data
    finally:
        shutil.rmtree(folder)


@EXAMPLES
@given(command=command_names, tail=st.binary(min_size=0, max_size=9000))
def test_random_bytes_after_a_valid_header(command, tail):
    folder = fresh_folder()
    try:
        db = folder / "records.db"
        db.write_bytes(SQLITE_HEADER + tail)
        assert_refused(command, str(db), folder)
    finally:
        shutil.rmtree(folder)


@EXAMPLES
@given(command=command_names, data=st.data())
def test_a_real_store_damaged_or_truncated(command, data, good_store):
    good = good_store.read_bytes()
    how = data.draw(st.sampled_from(["truncated", "random after header", "pages overwritten"]))
    if how == "truncated":
        broken = good[: data.draw(st.integers(1, len(good) - 1))]
    elif how == "random after header":
        broken = good[:100] + data.draw(st.binary(min_size=len(good) - 100, max_size=len(good) - 100))
    else:  # the schema page and the b-tree pages after it scrambled, the header intact
        start = data.draw(st.integers(100, 4096))
        broken = good[:start] + os.urandom(len(good) - start)
    folder = fresh_folder()
    try:
        db = folder / "records.db"
        db.write_bytes(broken)
        assert_refused(command, str(db), folder)
        assert db.read_bytes() == broken
    finally:
        shutil.rmtree(folder)


@EXAMPLES
@given(
    command=command_names,
    url=st.one_of(
        st.builds("{}://{}".format, st.sampled_from(["mysql", "foo", "oracle", "mssql", "mongodb", "redis"]),
                  st.from_regex(r"[a-z0-9@:/._-]{0,20}", fullmatch=True)),
        st.builds("postgresql://h:{}/x".format, st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)),
        st.builds("postgresql://[{}".format, st.from_regex(r"[0-9:a-f]{0,8}", fullmatch=True)),
        st.builds("postgresql://u:pw@127.0.0.1:{}/{}".format, st.sampled_from([1, 9, 13]),
                  st.from_regex(r"[a-z]{1,8}", fullmatch=True)),
        st.builds("sqlite+{}:///x.db".format, st.from_regex(r"[a-z]{1,8}", fullmatch=True)),
    ),
    via_env=st.booleans(),
)
def test_unknown_schemes_malformed_urls_and_closed_ports(command, url, via_env):
    folder = fresh_folder()
    cwd = os.getcwd()
    os.chdir(folder)  # a relative SQLite path would land here: nothing may
    try:
        started = time.monotonic()
        line = assert_refused(command, url, folder, via_env=via_env)
        assert time.monotonic() - started < 5, "a bad URL must fail fast"
        assert ":pw@" not in line
    finally:
        os.chdir(cwd)
        shutil.rmtree(folder)


def test_folders_and_newer_or_foreign_schemas(tmp_path, good_store):
    (tmp_path / "folder.db").mkdir()
    for command in COMMANDS:
        assert_refused(command, str(tmp_path / "folder.db"), tmp_path, "not a folder")
    newer = tmp_path / "newer.db"
    newer.write_bytes(good_store.read_bytes())
    with sqlite3.connect(newer) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0042'")
    connection.close()
    for command in COMMANDS:
        assert_refused(command, str(newer), tmp_path, "schema revision 0042", "upgrade dse")
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE accounts (id INTEGER)")
    connection.close()
    for command in COMMANDS:
        assert_refused(command, str(foreign), tmp_path, "no dse schema version")
    assert sqlite3.connect(foreign).execute("SELECT name FROM sqlite_master").fetchall() == [("accounts",)]


@pytest.fixture
def read_only_mount(tmp_path, good_store):
    """A folder holding a good store, bind-mounted read-only (root ignores file modes)."""
    source, mount = tmp_path / "src", tmp_path / "ro"
    source.mkdir()
    mount.mkdir()
    (source / "records.db").write_bytes(good_store.read_bytes())
    if os.geteuid() != 0 or shutil.which("mount") is None:
        os.chmod(source / "records.db", 0o444)
        os.chmod(source, 0o555)
        yield source
        os.chmod(source, 0o755)
        return
    done = subprocess.run(["mount", "--bind", str(source), str(mount)], capture_output=True)
    if done.returncode or subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)]).returncode:
        subprocess.run(["umount", str(mount)], capture_output=True)
        pytest.skip(f"cannot make a read-only mount as root here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_read_only_store_or_folder(read_only_mount):
    for command in COMMANDS:
        assert_refused(command, str(read_only_mount / "records.db"), read_only_mount, "read-only")
        assert_refused(command, str(read_only_mount / "new" / "records.db"), read_only_mount)


def test_a_newer_postgresql_store_and_a_missing_database(pg_url, tmp_path, monkeypatch):
    monkeypatch.setenv("DSE_EVIDENCE_DIR", str(tmp_path / "evidence"))
    Store(pg_url).close()
    from sqlalchemy import create_engine

    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as connection:
        connection.exec_driver_sql("UPDATE alembic_version SET version_num = '0042'")
    engine.dispose()
    for command in COMMANDS:
        assert_refused(command, pg_url, tmp_path, "schema revision 0042", "upgrade dse")
    missing = pg_url.rsplit("/", 1)[0] + "/no_such_database"
    for command in ("history", "sweep"):
        assert_refused(command, missing, tmp_path, "a reachable record store")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_dse_executable_says_one_line(command, tmp_path):
    """The installed `dse` in a fresh process: exit 2, one line, for a text file as store."""
    db = tmp_path / "notes.db"
    db.write_text("not a database\n")
    before = listing(tmp_path)
    done = subprocess.run([str(DSE), *COMMANDS[command](tmp_path), "--db", str(db)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "not a SQLite database" in done.stderr
    assert listing(tmp_path) == before


def test_the_dse_executable_fails_fast_on_a_closed_port(tmp_path):
    def history(url: str) -> tuple[subprocess.CompletedProcess, float]:
        started = time.monotonic()
        done = subprocess.run([str(DSE), "history"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                              env={**os.environ, "DSE_DB": url})
        return done, time.monotonic() - started

    # Against the same command on a store it can open, timed in the same moment: its start-up
    # alone takes seconds on a loaded machine (5 s once, under a full suite and two busy loops).
    Store(tmp_path / "ok.db").close()
    good, baseline = history(f"sqlite:///{tmp_path / 'ok.db'}")
    assert good.returncode == 0, good.stderr
    done, took = history("postgresql://dse@127.0.0.1:1/x")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert took < baseline + 5, (took, baseline)


def test_zz_generated_case_tally():
    """How many generated cases ran, and how they ended (printed with -s)."""
    print(f"\nbad-store cases: {TALLY}")
    assert TALLY["traceback"] == 0 and TALLY["created"] == 0
    assert TALLY["tried"] == TALLY["clean"]
