"""The graph cache: the quickstart sweep's first run against a rerun of the recorded sweep,
and `dse recipe show mlp` with a cold and a warm cache, each a fresh `dse` process, in the
same run.

    .venv/bin/python bench/bench_rerun.py [--repeat 3]

Each repeat starts from an empty cache folder (DSE_CACHE_DIR in a temporary folder) and an
empty store. Then the store's newest run is made one left "running" by a process gone
silent, so the next sweep resumes (reaps it, evaluates its candidate again, judges the
evidence and finds the same proposal), and the rerun after that resumed sweep is timed
too. Prints medians and the ratios (target: rerun <= 0.15x the first run, after a resumed
sweep as well).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dse", *argv], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env, cwd=REPO)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
            env = {**os.environ, "PYTHONPATH": str(REPO), "DSE_CACHE_DIR": os.path.join(tmp, "cache")}
            db = os.path.join(tmp, "records.db")
            sweep = ["sweep", "experiments/quickstart.toml", "--db", db]
            rows.setdefault("sweep quickstart, first run (cold cache)", []).append(timed(sweep, env))
            rows.setdefault("sweep quickstart, rerun of the recorded sweep", []).append(timed(sweep, env))
            with sqlite3.connect(db) as connection:  # a run left "running" by a process gone silent
                connection.execute("UPDATE run SET status = 'running', finished_at = NULL, pid = NULL, "
                                   "heartbeat_at = '2000-01-01 00:00:00.000000' WHERE id = (SELECT max(id) FROM run)")
            connection.close()
            rows.setdefault("sweep quickstart, resumed (one candidate again)", []).append(timed(sweep, env))
            rows.setdefault("sweep quickstart, rerun after the resumed sweep", []).append(timed(sweep, env))
            env["DSE_CACHE_DIR"] = os.path.join(tmp, "cache2")
            show = ["recipe", "show", "mlp"]
            rows.setdefault("recipe show mlp, cold cache", []).append(timed(show, env))
            rows.setdefault("recipe show mlp, warm cache", []).append(timed(show, env))
    medians = {name: statistics.median(times) for name, times in rows.items()}
    print(f"median of {args.repeat}, each a fresh process")
    for name, seconds in medians.items():
        print(f"{name:<48} {seconds:8.2f} s")
    first, rerun = medians["sweep quickstart, first run (cold cache)"], medians["sweep quickstart, rerun of the recorded sweep"]
    cold, warm = medians["recipe show mlp, cold cache"], medians["recipe show mlp, warm cache"]
    print(f"rerun / first run: {rerun / first:.2f}x (target <= 0.15x)")
    after = medians["sweep quickstart, rerun after the resumed sweep"]
    print(f"rerun after a resumed sweep / first run: {after / first:.2f}x (target <= 0.15x)")
    print(f"recipe show warm / cold: {warm / cold:.2f}x")


if __name__ == "__main__":
    main()
