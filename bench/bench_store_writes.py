"""The CPU a grid sweep's store writes take (issue 35): the driver process's CPU seconds
inside the Store's batched writes (add_candidates_and_start_runs, start_runs, finish_runs)
during bench_sweep's analytical grid sweep (2,320 candidates into a fresh SQLite store),
and what of it each part of those writes takes.

    .venv/bin/python bench/bench_store_writes.py [--repeat 7] [--rounds 2] [--against /work/main]

CPU time, not wall time: on a shared machine the wall time of a write is mostly other
processes'. With --against, the same measurement on that tree's dse, alternating rounds
of the two (each in its own process), and the ratio of their medians: read the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# (module, function) pairs timed within the writes, where the tree has them
PARTS = (("dse.records.checks", "checked_results"), ("dse.records.writes", "prepared_candidates"),
         ("dse.records.writes", "text_ids"), ("dse.records.writes", "_sqlite_insert_candidates"),
         ("dse.records.writes", "_sqlite_insert_runs"), ("dse.records.candidate_runs", "added"),
         ("dse.records.writes", "_sqlite_finish_runs"), ("dse.records.candidate_runs", "changed"),
         ("dse.records.packed", "write"), ("dse.records.latest", "record"))
WRITES = ("add_candidates_and_start_runs", "start_runs", "finish_runs")


def measure(repeat: int) -> dict:
    """{"writes": median CPU seconds of the writes per sweep, part: median seconds, ...}
    over `repeat` sweeps, in this process (dse from DSE_BENCH_TREE)."""
    import importlib

    sys.path.insert(0, str(REPO / "bench"))
    import bench_sweep  # noqa: F401 - puts DSE_BENCH_TREE's dse first on the path

    from dse.records import Store, store as store_module
    from dse.runner import Sweep, load_spec
    from dse.runner.execution import make_executor
    from dse.runner.stages import analytical_graph

    spent: dict[str, float] = {}

    def timed(owner, name, label):
        inner = getattr(owner, name)

        def wrapper(*args, **kwargs):
            started = time.process_time()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - started

        setattr(owner, name, wrapper)

    for name in WRITES:
        timed(Store, name, "writes")
    for module, name in PARTS:
        owner = importlib.import_module(module)
        if hasattr(owner, name):
            # the store calls checked_results through its own import of it
            timed(store_module if name == "checked_results" else owner, name, name)
    graph = analytical_graph("mlp", {})
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = load_spec(bench_sweep.write_spec(Path(tmp), "grid", 1))
        for i in range(repeat):
            spent.clear()
            executor = make_executor(graph, 1)
            try:
                with Store(Path(tmp) / f"s{i}.db") as store:
                    result = Sweep(spec, graph, store, executor, progress=False).run()
            finally:
                executor.close()
            runs.append(dict(spent, candidates=result.evaluated))
    return {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}


def in_process_of(tree: Path, repeat: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", "--repeat", str(repeat)], capture_output=True, text=True,
                         env={**os.environ, "DSE_BENCH_TREE": str(tree)}, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7, help="sweeps a measurement (median)")
    ap.add_argument("--rounds", type=int, default=2, help="measurements of each tree, alternating")
    ap.add_argument("--against", type=Path, help="another checkout to measure alike (main, say)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.repeat)))
        return
    trees = [Path(os.environ.get("DSE_BENCH_TREE", REPO))] + ([args.against] if args.against else [])
    found: dict[Path, list[dict]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            found[tree].append(in_process_of(tree, args.repeat))
    medians = {t: {k: statistics.median(m[k] for m in ms) for k in ms[0]} for t, ms in found.items()}
    names = ["writes"] + [name for _, name in PARTS]
    print(f"grid sweep store writes, CPU ms (median of {args.rounds} x {args.repeat} sweeps)")
    print(f"{'':<28}" + "".join(f"{str(t)[-22:]:>24}" for t in trees))
    for name in names:
        row = [medians[t].get(name) for t in trees]
        print(f"{name:<28}" + "".join(f"{'-' if v is None else f'{v * 1000:.1f}':>24}" for v in row))
    n = medians[trees[0]]["candidates"]
    mine = medians[trees[0]]["writes"]
    line = f"{trees[0]}: {mine * 1000:.1f} ms a sweep of {n:.0f} candidates = {n / mine:,.0f} candidates/s of writes"
    if args.against:
        other = medians[args.against]["writes"]
        line += f"; {args.against}: {other * 1000:.1f} ms; ratio {mine / other:.2f}"
    print(line)


if __name__ == "__main__":
    main()
