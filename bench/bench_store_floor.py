"""What each table (and trigger) of a grid sweep's records costs SQLite alone (issue 35).

    .venv/bin/python bench/bench_store_floor.py [--repeat 7]
    DSE_BENCH_TREE=/work/main .venv/bin/python bench/bench_store_floor.py   # another tree's schema

A grid sweep (bench_sweep's spec, analytical only) is recorded once; its rows are then
inserted again into fresh stores of the tree's schema, one executemany a table in one
transaction (WAL, synchronous NORMAL, foreign keys on, as the store opens), nothing
computed: all the tables together (the floor under any recording of those rows) and each
table alone (the tables it needs filled first, untimed). Where triggers on run make
candidate_run's rows (before 0017), those rows are not inserted: the run line includes
them. Medians of --repeat; per candidate in microseconds; bytes of each table's rows.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
import bench_sweep  # noqa: E402 - puts DSE_BENCH_TREE's dse first on the path

import dse  # noqa: E402
from dse.records import Store  # noqa: E402
from dse.runner import Sweep, load_spec  # noqa: E402
from dse.runner.execution import make_executor  # noqa: E402
from dse.runner.stages import analytical_graph  # noqa: E402

ORDER = ("experiment", "metric_layout", "figures_layout", "candidate_text", "candidate", "run", "run_metrics",
         "latest_figures", "candidate_run")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    graph = analytical_graph("mlp", {})
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        spec = load_spec(bench_sweep.write_spec(tmp, "grid", 1))
        executor = make_executor(graph, 1)
        try:
            with Store(tmp / "source.db") as store:
                Sweep(spec, graph, store, executor, progress=False).run()
        finally:
            executor.close()
        with Store(tmp / "schema.db"):
            pass  # the tree's schema, copied for every trial
        source = sqlite3.connect(tmp / "source.db")
        held = {r[0] for r in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        triggers = source.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'").fetchone()[0]
        tables = [t for t in ORDER if t in held and not (t == "candidate_run" and triggers)]
        rows = {t: source.execute(f"SELECT * FROM {t}").fetchall() for t in tables}
        columns = {t: [c[1] for c in source.execute(f"PRAGMA table_info({t})")] for t in tables}
        source.close()
        n = len(rows["candidate"])
        counter = iter(range(10**6))

        def trial(timed: list[str]) -> float:
            path = tmp / f"t{next(counter)}.db"
            shutil.copy(tmp / "schema.db", path)
            db = sqlite3.connect(path, isolation_level=None)
            for pragma in ("journal_mode=WAL", "synchronous=NORMAL"):
                db.execute(f"PRAGMA {pragma}")

            def insert(names: list[str]) -> None:
                db.execute("BEGIN IMMEDIATE")
                db.execute("PRAGMA defer_foreign_keys=ON")  # experiment and candidate name each other
                for t in names:
                    db.executemany(f"INSERT INTO {t} ({', '.join(columns[t])}) VALUES "
                                   f"({', '.join('?' * len(columns[t]))})", rows[t])
                db.execute("COMMIT")

            last = max(tables.index(t) for t in timed)
            # the rows the timed tables name, untimed and unchecked (the experiment names its baseline)
            insert([t for t in tables[:last] if t not in timed and t != "candidate_run"])
            db.execute("PRAGMA foreign_keys=ON")  # as the store opens
            started = time.perf_counter()
            insert(timed)
            seconds = time.perf_counter() - started
            db.close()
            for leftover in tmp.glob(path.name + "*"):
                leftover.unlink()
            return seconds

        def median(timed: list[str]) -> float:
            return statistics.median(trial(timed) for _ in range(args.repeat))

        print(f"a grid sweep's records: {n} candidates, {sum(map(len, rows.values())):,} rows"
              f"{' (candidate_run by triggers on run)' if triggers else ''}; dse at {Path(dse.__file__).parents[1]}")
        whole = median(tables)
        print(f"  {'all tables, one transaction':<36} {whole * 1000:8.1f} ms {whole * 1e6 / n:7.1f} us/candidate "
              f"{n / whole:9,.0f} candidates/s")
        for t in tables:
            if t == "experiment":
                continue
            s = median([t])
            size = sum(len(v) if isinstance(v, (str, bytes)) else 8 for r in rows[t] for v in r if v is not None)
            print(f"  {t + (' (+ triggers)' if t == 'run' and triggers else ''):<36} {s * 1000:8.1f} ms "
                  f"{s * 1e6 / n:7.1f} us/candidate {len(rows[t]):7,} rows {size / 1e6:6.2f} MB")


if __name__ == "__main__":
    main()
