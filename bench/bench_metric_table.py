"""`Store.metric_table` and `dse show EXPERIMENT` on a SQLite store of 100,000 candidates.

    .venv/bin/python bench/bench_metric_table.py [--candidates 100000] [--repeat 5] [--db /tmp/big.db]

The store is bench_records.py's (two runs a candidate, four metrics a run). Prints medians,
and each against `store.candidates()` of the same experiment measured in the same run
(the one read every table needs) and against the 1 s target; metric_table (from
latest_figures, 0012) beside the same table read from the packed metric rows (the read
before 0011), in the same run, with their ratios. (The read from latest_metric, before
0012, went with the table in 0016.) `--db`
keeps the store in a file for the next run (filling it takes minutes); a store made at an
older schema is upgraded on open, timed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_records import populate  # noqa: E402

import pandas as pd  # noqa: E402

from dse.cli import main as cli  # noqa: E402
from dse.records import Store, reads  # noqa: E402
from dse.records.engine import SCHEMA_HEAD, database_url, make_engine, schema_is_current  # noqa: E402

TARGET_S = 1.0


def interleaved_medians(reads: dict, repeat: int) -> tuple[dict[str, float], dict[str, float]]:
    """Medians of wall-clock seconds and of this process's CPU seconds, each read once a
    round. On the shared machine the wall clock follows the load; the CPU time much less."""
    wall: dict[str, list[float]] = {name: [] for name in reads}
    cpu: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(repeat):
        for name, read in reads.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            read()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return ({name: statistics.median(t) for name, t in wall.items()},
            {name: statistics.median(t) for name, t in cpu.items()})



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--db", help="a SQLite file to reuse (populated first if it does not exist)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dse-bench-") as folder:
        db = args.db or os.path.join(folder, "records.db")
        if not os.path.exists(db):
            start = time.perf_counter()
            populate(db, 2 * args.candidates)
            print(f"store of {args.candidates:,} candidates populated in {time.perf_counter() - start:.1f} s")
        experiment = "big"

        def show() -> None:
            with contextlib.redirect_stdout(io.StringIO()):
                assert cli(["show", experiment, "--db", db]) == 0

        def from_metrics(kind: str):
            # The pre-0011 read: every metric of the kind through its run.
            with store.engine.connect() as connection:
                return reads.metric_table(connection, experiment, kind, from_metrics=True)

        def candidates_through_rows():
            # The pre-0011 read: each candidate's latest run grouped from the runs, SQLAlchemy rows.
            with store.engine.connect() as connection:
                return reads.candidates(connection, reads.experiment_id_of(connection, experiment), through_rows=True)

        engine = make_engine(database_url(db))
        behind = not schema_is_current(engine)
        engine.dispose()
        start = time.perf_counter()
        with Store(db) as store:
            if behind:
                print(f"store upgraded to schema {SCHEMA_HEAD} on open in {time.perf_counter() - start:.1f} s")
            pd.testing.assert_frame_equal(store.candidates(experiment), candidates_through_rows())
            for kind in ("analytical", "emulator_cycles"):
                new, old = store.metric_table(experiment, kind), from_metrics(kind)
                gone = [c for c in old.columns if c not in new.columns]  # names only older runs recorded
                assert old[gone].isna().all().all()
                pd.testing.assert_frame_equal(new, old.drop(columns=gone))
            # Round robin (one of each per round), so a loaded machine's swings fall on all alike.
            rows, cpu = interleaved_medians({
                "store.candidates(big)": lambda: store.candidates(experiment),
                "  the same from the runs, SQLAlchemy rows (pre-0011)": candidates_through_rows,
                "store.metric_table(big, analytical)": lambda: store.metric_table(experiment, "analytical"),
                "  the same from the metric rows (pre-0011)": lambda: from_metrics("analytical"),
                "store.metric_table(big, emulator_cycles)": lambda: store.metric_table(experiment, "emulator_cycles"),
                "  the same from the metric rows (pre-0011) ": lambda: from_metrics("emulator_cycles"),
                "dse show big (in process: open, read, print)": show,
                "store.metric_table(small-00, analytical), 1 candidate": lambda: store.metric_table("small-00",
                                                                                                  "analytical"),
            }, args.repeat)
    base = rows["store.candidates(big)"]
    print(f"median of {args.repeat}, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores")
    print(f"{'read':<56} {'seconds':>8} {'x candidates()':>15} {'x 1 s target':>13} {'CPU s':>7}")
    for name, seconds in rows.items():
        print(f"{name:<56} {seconds:8.3f} {seconds / base:15.2f} {seconds / TARGET_S:13.2f} {cpu[name]:7.3f}")
    for kind, gap in (("analytical", ""), ("emulator_cycles", " ")):
        new, oldest = f"store.metric_table(big, {kind})", "  the same from the metric rows (pre-0011)" + gap
        print(f"metric_table(big, {kind}): x{rows[oldest] / rows[new]:.2f} faster than from the metric rows "
              f"(CPU x{cpu[oldest] / cpu[new]:.2f})")


if __name__ == "__main__":
    main()
