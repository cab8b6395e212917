"""The emulator stage with 1 and with 2 worker processes, in the same run.

    .venv/bin/python bench/bench_emulator_workers.py [--repeat 3]

bench_sweep.py's resnet18 (32x32) sweep with every feasible candidate emulated. With one
worker the stage still runs in a one-process pool, whose worker limits BLAS and torch to
one thread as every pool worker does (dse/runner/execution.py `_init_worker`), so 2 workers
should be 1.7x-2.1x faster, not more (more would mean the single worker is slowed by
oversubscribed threads). Runs alternate 1, 2, 1, 2, ... so the machine's load hits both.
"""

from __future__ import annotations

import argparse
import statistics

from bench_sweep import emulator_stage_time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    times: dict[int, list[float]] = {1: [], 2: []}
    emulated = 0
    for _ in range(args.repeat):
        for workers in (1, 2):
            seconds, emulated = emulator_stage_time(workers, 1)
            times[workers].append(seconds)
    one, two = statistics.median(times[1]), statistics.median(times[2])
    print(f"emulator stage, {emulated} resnet18 candidates, median of {args.repeat}")
    print(f"1 worker  {one:8.2f} s   runs {[round(t, 1) for t in times[1]]}")
    print(f"2 workers {two:8.2f} s   runs {[round(t, 1) for t in times[2]]}")
    print(f"2 workers vs 1: {one / two:.2f}x faster (target 1.7x-2.1x)")


if __name__ == "__main__":
    main()
