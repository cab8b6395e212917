"""The recorded rerun's shortcut on a PostgreSQL store (dse.runner.rerun over
dse.records.light_pg): the full sweep's result, output and exit code, nothing written, none
of the stages' imports nor SQLAlchemy; wherever the full sweep would still do something (a
run in flight, another sweep's lock, a changed spec, an unfinished candidate, a schema to
upgrade, a run no judgement covered) it runs; a server it cannot reach is the full sweep's
error, word for word. On a real server (tests/pg.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import psycopg
import pytest
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from test_rerun import LIGHT_RECORDS, fields, rerun_in_a_fresh_process
from test_runner import write_spec

from dse.records import Store, candidate_runs
from dse.records.light_pg import connect_args
from dse.runner import launch, load_spec, run_sweep
from dse.runner.rerun import recorded_rerun
from dse.runner.sweep import sweep_into_store

TABLES = ("alembic_version", "experiment", "candidate", "run", "run_metrics", "metric_layout", "artifact", "decision", "sweep_lock",
          "note", "experiment_link")


@pytest.fixture
def pg(pg_url, tmp_path, monkeypatch):  # noqa: F811
    """A new, empty PostgreSQL database (its evidence in the test's folder), as a URL."""
    monkeypatch.setenv("DSE_EVIDENCE_DIR", str(tmp_path / "evidence"))
    return pg_url


# What the store's writers of runs do after changing runs' status (0017: no triggers).
KEEP_CANDIDATE_RUN = candidate_runs.STATUS.format(ids="SELECT id FROM run")


def sql(url: str, statement: str, params: tuple = ()) -> list[tuple]:
    """`statement` on its own committed transaction; its rows, if any. An UPDATE of runs
    is followed by candidate_run's, as a writer of runs does."""
    with psycopg.connect(**connect_args(url)) as connection:
        cursor = connection.execute(statement, params or None)
        rows = cursor.fetchall() if cursor.description else []
        if statement.startswith("UPDATE run "):
            connection.execute(KEEP_CANDIDATE_RUN)
        return rows


def records(url: str) -> dict[str, list[tuple]]:
    """Every row of every table of the store, in a stable order."""
    with psycopg.connect(**connect_args(url)) as connection:
        names = {n for (n,) in connection.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert set(TABLES) <= names
        return {name: sorted(map(repr, connection.execute(f'SELECT * FROM "{name}"'))) for name in sorted(names)}


def test_a_recorded_rerun_prints_what_the_full_rerun_prints_imports_no_sqlalchemy_and_writes_nothing(
        tmp_path, pg, repo, cli, monkeypatch):
    spec = write_spec(tmp_path)
    assert run_sweep(spec, pg, progress=False).evaluated == 10
    before = records(pg)
    assert len(before["run"]) == 10 and len(before["decision"]) == 1
    fast = rerun_in_a_fresh_process(spec, pg, repo)
    # the light read's psycopg, and of the record store its light modules only
    assert {m for m in fast["modules"] if m.startswith("dse.records")} == LIGHT_RECORDS | {"dse.records.light_pg"}
    assert "psycopg" in fast["modules"] and "dse.runner.rerun" in fast["modules"]
    assert records(pg) == before
    # The full sweep's rerun (the shortcut turned off): the same text and code, nothing written either.
    monkeypatch.setattr(launch, "recorded_rerun", lambda *a, **k: None)
    code, out, _ = cli("sweep", spec, "--db", pg, "--no-progress")
    assert (code, out) == (fast["code"], fast["out"])
    assert records(pg) == before


HOLD_LOCK = """
import sys
from dse.records import Store
with Store(sys.argv[1]) as store:
    store.acquire_sweep(int(sys.argv[2]), "another sweep")
    print("held", flush=True)
    sys.stdin.read()  # until the test closes it
    store.release_sweep(int(sys.argv[2]))
"""


def test_the_shortcut_stands_aside_on_postgresql_while_the_full_sweep_has_work(tmp_path, pg, repo, cli):
    spec_path = write_spec(tmp_path)
    spec = load_spec(spec_path)
    assert recorded_rerun(spec, pg) is None  # an empty database: the full sweep makes the store
    run_sweep(spec, pg, progress=False)
    fast = recorded_rerun(spec, pg)
    assert fast is not None and fast.proposed and fast.resumed == 10 and sum(fast.counts.values()) == 10
    assert fields(fast) == fields(sweep_into_store(spec, pg, progress=False))
    for scheme in ("postgresql://", "postgres://"):  # the driverless spellings the Store takes as psycopg's
        assert fields(recorded_rerun(spec, pg.replace("postgresql+psycopg://", scheme))) == fields(fast)
    newest, status, finished, beat = sql(pg, "SELECT id, status, finished_at, heartbeat_at FROM run "
                                             "ORDER BY id DESC LIMIT 1")[0]

    # A run left "running" (in flight, or by a process gone silent): the store's open reaps it.
    sql(pg, "UPDATE run SET status = 'running', finished_at = NULL, pid = NULL, "
            "heartbeat_at = '2000-01-01 00:00:00+00' WHERE id = %s", (newest,))
    assert recorded_rerun(spec, pg) is None
    sql(pg, "UPDATE run SET status = %s, finished_at = %s, heartbeat_at = %s WHERE id = %s",
        (status, finished, beat, newest))
    assert fields(recorded_rerun(spec, pg)) == fields(fast)

    # Another live process sweeping the experiment (its lock row): the full sweep says so, exit 2.
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, pg, str(fast.experiment_id)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(repo)})
    try:
        assert holder.stdout.readline().strip() == "held"
        assert sql(pg, "SELECT count(*) FROM sweep_lock")[0][0] == 1
        assert recorded_rerun(spec, pg) is None
        code, _, err = cli("sweep", spec_path, "--db", pg, "--no-progress")
        assert code == 2 and f"process {holder.pid} on host" in err and "Traceback" not in err
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    assert sql(pg, "SELECT count(*) FROM sweep_lock")[0][0] == 0
    assert fields(recorded_rerun(spec, pg)) == fields(fast)

    # A lock row left by a dead process: the full sweep takes it over (a write), so it runs.
    sql(pg, "INSERT INTO sweep_lock (experiment_id, host, pid, pid_start, command, started_at, heartbeat_at) "
            "VALUES (%s, 'elsewhere', 1, 'x', 'dse sweep', '2000-01-01 00:00:00+00', '2000-01-01 00:00:00+00')",
        (fast.experiment_id,))
    assert recorded_rerun(spec, pg) is None
    assert fields(sweep_into_store(spec, pg, progress=False)) == fields(fast)
    assert sql(pg, "SELECT count(*) FROM sweep_lock")[0][0] == 0 and fields(recorded_rerun(spec, pg)) == fields(fast)

    # An unfinished candidate (its latest analytical run crashed): the sweep evaluates it again.
    sql(pg, "UPDATE run SET status = 'crashed', error = 'killed' WHERE id = %s", (newest,))
    assert recorded_rerun(spec, pg) is None
    assert sweep_into_store(spec, pg, progress=False).evaluated == 1
    assert fields(recorded_rerun(spec, pg)) == fields(fast)

    # A store not at this dse's schema head (an older one, upgraded by the Store's open; a newer
    # one, refused by it): either is the full sweep's.
    for revision in ("0012", "0099"):
        sql(pg, "UPDATE alembic_version SET version_num = %s", (revision,))
        assert recorded_rerun(spec, pg) is None
    from dse.records.engine import SCHEMA_HEAD

    sql(pg, "UPDATE alembic_version SET version_num = %s", (SCHEMA_HEAD,))
    assert fields(recorded_rerun(spec, pg)) == fields(fast)

    # A spec changed under the same name (the sweep's error to give), an experiment not recorded.
    changed = load_spec(write_spec(tmp_path, banks="[4, 8, 16, 20]"))
    assert recorded_rerun(changed, pg) is None
    assert recorded_rerun(load_spec(write_spec(tmp_path, name="other")), pg) is None
    # Clusters keep the full sweep.
    assert recorded_rerun(spec, pg, cluster="tcp://127.0.0.1:8786") is None


def test_a_rerun_after_a_resumed_sweep_on_postgresql_is_recorded_until_a_run_is_newer_than_its_judgement(
        tmp_path, pg):
    spec = load_spec(write_spec(tmp_path))
    run_sweep(spec, pg, progress=False)
    sql(pg, "UPDATE run SET status = 'running', finished_at = NULL, pid = NULL, "
            "heartbeat_at = '2000-01-01 00:00:00+00' WHERE id = (SELECT max(id) FROM run)")
    assert sweep_into_store(spec, pg, progress=False).evaluated == 1

    def proposal_and_newest_run():
        return (sql(pg, "SELECT count(*), max(created_at) FROM decision WHERE kind = 'proposal'")[0],
                sql(pg, "SELECT max(id), max(finished_at) FROM run")[0])

    (n_proposals, proposed_at), (newest_run, newest_at) = proposal_and_newest_run()
    assert n_proposals == 1 and newest_at > proposed_at  # the resumed sweep added no proposal
    assert sql(pg, "SELECT judged_run_id FROM experiment")[0][0] == newest_run
    fast = recorded_rerun(spec, pg)
    assert fast is not None and fast.proposed
    before = records(pg)
    assert fields(fast) == fields(sweep_into_store(spec, pg, progress=False))
    assert records(pg) == before

    # No judgement on record (a store from before 0013): `propose` judges the newer evidence.
    sql(pg, "UPDATE experiment SET judged_run_id = NULL")
    assert recorded_rerun(spec, pg) is None
    sql(pg, "UPDATE experiment SET judged_run_id = %s", (newest_run,))

    # A run recorded after the judgement (no sweep judged it): the full sweep judges it.
    with Store(pg) as store:
        store.finish_run(store.start_run(1, "analytical"), "ok")
    assert recorded_rerun(spec, pg) is None
    full = sweep_into_store(spec, pg, progress=False)
    assert proposal_and_newest_run()[0][0] == 1 and proposal_and_newest_run()[1][0] == newest_run + 1
    fast = recorded_rerun(spec, pg)
    assert fast is not None and fields(fast) == fields(full)


def test_a_server_the_light_read_cannot_reach_is_the_full_sweeps_error_word_for_word(
        tmp_path, pg_server, cli, monkeypatch):  # noqa: F811
    spec = write_spec(tmp_path)
    import socket

    with socket.socket() as s:  # a port no server listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    urls = [f"postgresql://dse@127.0.0.1:{closed}/dse",  # nothing listening
            pg_server.url("no_such_database"),  # a server without that database
            f"postgresql://nobody@127.0.0.1:{pg_server.port}/postgres",  # a role the server lacks
            "postgresql://dse@127.0.0.1:notaport/dse",  # the URL's own mistake
            "postgresql://dse@127.0.0.1:1/dse?sslmode=bogus"]  # an option libpq refuses
    for url in urls:
        assert recorded_rerun(load_spec(spec), url) is None
    shortcut = [cli("sweep", spec, "--db", url, "--no-progress") for url in urls]
    monkeypatch.setattr(launch, "recorded_rerun", lambda *a, **k: None)
    full = [cli("sweep", spec, "--db", url, "--no-progress") for url in urls]
    assert shortcut == full
    for code, _, err in shortcut:
        assert code == 2 and "--db" in err and "Traceback" not in err


@pytest.mark.parametrize("url", [
    "postgresql://dse@127.0.0.1:5433/records",
    "postgres://u%40x:p%3Aw%2Fd@db.example.org/dse",
    "postgresql+psycopg://alice:s3cret@[::1]:6000/my%20db?sslmode=require&application_name=x",
    "postgresql:///dse",  # the local socket, libpq's defaults
    "postgresql://@/dse?options=-csearch_path%3Ddse",
    "postgresql://bob@host/db?connect_timeout=30",
])
def test_the_light_read_connects_with_the_keywords_sqlalchemys_psycopg_dialect_would(url):
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
    from sqlalchemy.engine import make_url

    _, expected = PGDialect_psycopg().create_connect_args(make_url(url))
    assert connect_args(url) == expected
    # the Store strips its own ?evidence_dir= before the driver sees the URL
    joined = url + ("&" if "?" in url else "?") + "evidence_dir=/tmp/evidence"
    assert connect_args(joined) == expected


@pytest.mark.parametrize("url", [
    "sqlite:///records.db", "mysql://u@h/db", "postgresql+psycopg2://u@h/db",  # not this read's
    "postgresql://u@h/db?host=a:1&host=b:2", "postgresql://u@h/db?host=a,b&port=1,2",  # multi-host forms
    "postgresql://u@h:nope/db",  # a bad port: the Store's error
])
def test_urls_the_light_read_leaves_to_the_store(url):
    assert connect_args(url) is None


def test_the_light_read_takes_the_evidence_folders_the_store_takes(tmp_path):
    """`?evidence_dir=`: where the Store refuses the folder (its error to give), the light read
    connects to nothing; where it takes it, the light read does too (the Store's check is the
    reference)."""
    from dse.errors import InputError
    from dse.records.opening import split_evidence_dir

    (tmp_path / "a-file").write_text("x")
    (tmp_path / "folder").mkdir()
    base = "postgresql://dse@127.0.0.1:5432/dse?sslmode=disable&"
    queries = ["evidence_dir=", "evidence_dir=%20%20", f"evidence_dir={tmp_path}/a-file",
               f"evidence_dir={tmp_path}/a-file/sub", f"evidence_dir={tmp_path}/folder&evidence_dir={tmp_path}",
               f"evidence_dir={tmp_path}/folder", f"evidence_dir={tmp_path}/new/deeper", "evidence_dir=~/x"]
    taken = []
    for query in queries:
        try:
            split_evidence_dir(base + query)
            store_takes = True
        except InputError:
            store_takes = False
        args = connect_args(base + query)
        assert (args is not None) == store_takes, query
        if args is not None:
            assert args == {"host": "127.0.0.1", "port": 5432, "user": "dse", "dbname": "dse", "sslmode": "disable"}
            taken.append(query)
    assert len(taken) == 3  # the folder, a new one inside one, one under ~
