"""NSGA-II sweeps: the sampler's time (ask + tell) and the recording per trial, at 150,
300, 600 and 1,200 trials in the same run; both should stay flat per trial.

    .venv/bin/python bench/bench_nsga2.py [--repeat 3] [--trials 150 300 600 1200]

The analytical-only mlp sweep of bench_sweep.py (2 objectives), over a space of
(banks_high - 3) x 80 points: with bench_sweep's own 2,320 points (--banks-high 32) 1,200
trials cover half the space, and NSGA-II's proposals are then mostly repeats of evaluated
candidates (the space runs out, not the sampler); the default 512 keeps 1,200 trials
under 3% of it. The workload is captured once. Prints medians per trial and each one's
ratio to the smallest budget's.
"""

from __future__ import annotations

import argparse
import warnings

import bench_sweep
import optuna
from bench_sweep import sweep_rate


def main() -> None:
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trials", type=int, nargs="+", default=[150, 300, 600, 1200])
    ap.add_argument("--banks-high", type=int, default=512, help="the bank-count knob's upper bound")
    args = ap.parse_args()
    bench_sweep.SPEC = bench_sweep.SPEC.replace("high = 32", f"high = {args.banks_high}")
    rows = []
    for trials in args.trials:
        seconds, evaluated, _, split = sweep_rate("nsga2", trials, args.repeat)
        rows.append((trials, evaluated, seconds, split["sampler"], split["record"]))
    base = rows[0]
    print(f"banks 4..{args.banks_high}; median of {args.repeat} sweeps each; per trial in ms, ratio to {base[0]} trials")
    print(f"{'trials':>6} {'evaluated':>9} {'sweep s':>8} {'sampler/trial':>13} {'ratio':>6} "
          f"{'record/trial':>12} {'ratio':>6} {'sweep/trial':>11} {'ratio':>6}")
    for trials, evaluated, seconds, sampler, record in rows:
        per = [1e3 * x / trials for x in (sampler, record, seconds)]
        ref = [1e3 * x / base[0] for x in (base[3], base[4], base[2])]
        print(f"{trials:>6} {evaluated:>9} {seconds:8.2f} {per[0]:13.3f} {per[0] / ref[0]:6.2f} "
              f"{per[1]:12.3f} {per[1] / ref[1]:6.2f} {per[2]:11.3f} {per[2] / ref[2]:6.2f}")


if __name__ == "__main__":
    main()
