"""The lifecycle's own costs beside the sweep they follow: the sweep's proposal (acceptance
clauses over every candidate's evidence) and a person's decision (the rules, one candidate).

    .venv/bin/python bench/bench_lifecycle.py [--repeat 5]

Sweeps experiments/quickstart.toml (90 candidates, analytical) into a temporary store, then
times `propose` and `decide` (median of --repeat runs each) and prints each as a ratio to
the sweep's analytical phase measured in the same run. Measures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from dse.records import Store
    from dse.runner import load_spec, run_sweep
    from dse.runner.acceptance import propose
    from dse.runner.decisions import decide

    spec_path = REPO / "experiments" / "quickstart.toml"
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        result = run_sweep(spec_path, db, progress=False)
        sweep_s = result.seconds["analytical"]
        spec = load_spec(spec_path)
        with Store(db) as store:
            n = len(store.candidates(result.experiment_id))
            best = int(store.decisions(result.experiment_id).iloc[-1]["candidate_id"])
            propose_s = median_seconds(lambda: propose(store, result.experiment_id, spec), args.repeat)
            decide_s = median_seconds(lambda: decide(store, "quickstart", best, "bench", "timing"), args.repeat)
    print(f"quickstart: {n} candidates; analytical phase of the sweep {sweep_s * 1e3:.1f} ms")
    print(f"propose (every candidate's clauses): median {propose_s * 1e3:.1f} ms = "
          f"{propose_s / sweep_s:.2f}x the sweep's analytical phase")
    print(f"decide (one candidate, rules + write): median {decide_s * 1e3:.1f} ms = "
          f"{decide_s / sweep_s:.2f}x the sweep's analytical phase")


if __name__ == "__main__":
    main()
