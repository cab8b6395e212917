"""The graph cache: the quickstart sweep's first run against a rerun of the recorded sweep,
on a SQLite store and (when a server can be started) a PostgreSQL one, and `dse recipe
show mlp` with a cold and a warm cache, each a fresh `dse` process, in the same run.

    .venv/bin/python bench/bench_rerun.py [--repeat 3] [--no-postgresql]

Each repeat starts from an empty cache folder (DSE_CACHE_DIR in a temporary folder) and an
empty store: a SQLite file, then a new database on a throwaway PostgreSQL server started as
the tests start one (tests/pg.py; skipped, saying why, without the binaries). Then the
store's newest run is made one left "running" by a process gone silent, so the next sweep
resumes (reaps it, evaluates its candidate again, judges the evidence and finds the same
proposal), and the rerun after that resumed sweep is timed too. Prints medians of the
wall time and of the process's CPU time (user + system; a PostgreSQL server's own is not
in it), and the ratios (target: rerun <= 0.15x the first run, after a resumed sweep as
well, on either store).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

from timing import process_seconds  # (bench/: this script's folder)

REPO = Path(__file__).resolve().parents[1]
LEFT_RUNNING = ("UPDATE run SET status = 'running', finished_at = NULL, pid = NULL, "
                "heartbeat_at = '2000-01-01 00:00:00+00' WHERE id = (SELECT max(id) FROM run)")
FIRST, RERUN, RESUMED, AFTER = ("first run (cold cache)", "rerun of the recorded sweep",
                                "resumed (one candidate again)", "rerun after the resumed sweep")


def timed(argv: list[str], env: dict) -> tuple[float, float]:
    """Wall and CPU seconds of one `dse` process."""
    return process_seconds([sys.executable, "-m", "dse", *argv], env, REPO)


def sweeps(rows: dict, backend: str, db: str, env: dict, left_running) -> None:
    """The four sweeps of one repeat into the store `db`; `left_running()` makes its newest run
    one left "running" between the second and the third."""
    sweep = ["sweep", "experiments/quickstart.toml", "--db", db]
    for step in (FIRST, RERUN, RESUMED, AFTER):
        if step == RESUMED:
            left_running()
        rows.setdefault(f"{backend}: sweep quickstart, {step}", []).append(timed(sweep, env))


def sqlite_left_running(db: str):
    def make() -> None:
        with contextlib.closing(sqlite3.connect(db)) as connection, connection:
            connection.execute(LEFT_RUNNING.replace("+00", ".000000"))  # the store's timestamp text
    return make


def postgresql_left_running(url: str):
    def make() -> None:
        import psycopg

        from dse.records.light_pg import connect_args

        with psycopg.connect(**connect_args(url), autocommit=True) as connection:
            connection.execute(LEFT_RUNNING)
    return make


@contextlib.contextmanager
def postgresql_server(wanted: bool):
    """A throwaway server (tests/pg.py), or None, saying why."""
    if not wanted:
        yield None
        return
    sys.path.insert(0, str(REPO / "tests"))
    from pg import PgUnavailable, throwaway_server

    try:
        with throwaway_server() as server:
            yield server
    except PgUnavailable as why:
        print(f"PostgreSQL rows skipped: {why}")
        yield None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-postgresql", action="store_true", help="the SQLite rows only")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    rows: dict[str, list[tuple[float, float]]] = {}
    backends = ["sqlite"]
    with postgresql_server(not args.no_postgresql) as server:
        if server is not None:
            backends.append("postgresql")
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
                env = {**os.environ, "PYTHONPATH": str(REPO), "DSE_CACHE_DIR": os.path.join(tmp, "cache"),
                       "DSE_EVIDENCE_DIR": os.path.join(tmp, "evidence")}
                db = os.path.join(tmp, "records.db")
                sweeps(rows, "sqlite", db, env, sqlite_left_running(db))
                if server is not None:
                    env["DSE_CACHE_DIR"] = os.path.join(tmp, "cache-pg")  # its first run is cold too
                    name = server.create_database()
                    try:
                        url = server.url(name)
                        sweeps(rows, "postgresql", url, env, postgresql_left_running(url))
                    finally:
                        server.drop_database(name)
                env["DSE_CACHE_DIR"] = os.path.join(tmp, "cache2")
                show = ["recipe", "show", "mlp"]
                rows.setdefault("recipe show mlp, cold cache", []).append(timed(show, env))
                rows.setdefault("recipe show mlp, warm cache", []).append(timed(show, env))
    wall = {name: statistics.median(w for w, _ in times) for name, times in rows.items()}
    cpu = {name: statistics.median(c for _, c in times) for name, times in rows.items()}
    print(f"median of {args.repeat}, each a fresh process; load {os.getloadavg()[0]:.1f}")
    print(f"{'':<62} {'wall':>8}   {'cpu':>8}")
    for name in rows:
        print(f"{name:<62} {wall[name]:8.2f} s {cpu[name]:8.2f} s")
    for backend in backends:
        first = f"{backend}: sweep quickstart, {FIRST}"
        for step, label in ((RERUN, "rerun"), (AFTER, "rerun after a resumed sweep")):
            name = f"{backend}: sweep quickstart, {step}"
            print(f"{backend}: {label} / first run: {wall[name] / wall[first]:.2f}x wall, "
                  f"{cpu[name] / cpu[first]:.2f}x cpu (target <= 0.15x)")
    cold, warm = wall["recipe show mlp, cold cache"], wall["recipe show mlp, warm cache"]
    print(f"recipe show warm / cold: {warm / cold:.2f}x")


if __name__ == "__main__":
    main()
