"""`Store.metric_table` and `dse show EXPERIMENT` on a SQLite store of 100,000 candidates.

    .venv/bin/python bench/bench_metric_table.py [--candidates 100000] [--repeat 5] [--db /tmp/big.db]

The store is bench_records.py's (two runs a candidate, four metrics a run). Prints medians,
and each against `store.candidates()` of the same experiment measured in the same run
(the one read every table needs) and against the 1 s target; metric_table beside the same table read from the metric rows
(the read before migration 0011), in the same run. `--db` keeps the store in a file for
the next run (filling it takes minutes).
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

TARGET_S = 1.0


def interleaved_medians(reads: dict, repeat: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(repeat):
        for name, read in reads.items():
            start = time.perf_counter()
            read()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}



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

        with Store(db) as store:
            pd.testing.assert_frame_equal(store.candidates(experiment), candidates_through_rows())
            for kind in ("analytical", "emulator_cycles"):
                new, old = store.metric_table(experiment, kind), from_metrics(kind)
                gone = [c for c in old.columns if c not in new.columns]  # names only older runs recorded
                assert old[gone].isna().all().all()
                pd.testing.assert_frame_equal(new, old.drop(columns=gone))
            # Round robin (one of each per round), so a loaded machine's swings fall on all alike.
            rows = interleaved_medians({
                "store.candidates(big)": lambda: store.candidates(experiment),
                "  the same from the runs, SQLAlchemy rows (pre-0011)": candidates_through_rows,
                "store.metric_table(big, analytical)": lambda: store.metric_table(experiment, "analytical"),
                "  the same from the metric rows (pre-0011)": lambda: from_metrics("analytical"),
                "store.metric_table(big, emulator_cycles)": lambda: store.metric_table(experiment, "emulator_cycles"),
                "  the same from the metric rows (pre-0011) ": lambda: from_metrics("emulator_cycles"),
                "dse show big (in process: open, read, print)": show,
            }, args.repeat)
    base = rows["store.candidates(big)"]
    print(f"median of {args.repeat}")
    print(f"{'read':<48} {'seconds':>8} {'x candidates()':>15} {'x 1 s target':>13}")
    for name, seconds in rows.items():
        print(f"{name:<48} {seconds:8.3f} {seconds / base:15.2f} {seconds / TARGET_S:13.2f}")


if __name__ == "__main__":
    main()
