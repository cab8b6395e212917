"""NSGA-II sweeps at 150, 300, 600 and 1,200 trials in the same run: Optuna's own time
(ask + tell) kept apart from dse's (recording, evaluation, the driver), per trial and
per proposal, and plain Optuna's NSGA-II on the same objective for reference.

    .venv/bin/python bench/bench_nsga2.py [--repeat 3] [--trials 150 300 600 1200] [--no-plain]

The analytical-only mlp sweep of bench_sweep.py (2 objectives), over a space of
(banks_high - 3) x 80 points: with bench_sweep's own 2,320 points (--banks-high 32) 1,200
trials cover half the space, and NSGA-II's proposals are then mostly repeats of evaluated
candidates (the space runs out, not the sampler); the default 512 keeps 1,200 trials
under 3% of it. The workload is captured once. Prints medians and each figure's ratio to
the smallest budget's:
  - proposals/trial: how many proposals NSGA-II makes per new candidate. A repeat of an
    evaluated candidate is asked again (dse never evaluates a candidate twice); as the
    population converges on the front, children repeat their parents more often, so this
    grows with the trials: the algorithm's, not the code's;
  - optuna ms/proposal: Optuna's ask + tell per proposal in dse's sweep (its study is
    rebuilt from the parent population past 200 trials, so it holds a bounded number of
    trials): should stay flat;
  - dse ms/trial: the sweep less Optuna's own time (recording, evaluation, the driver),
    and its recording alone: should stay flat;
  - plain optuna ms/trial: a bare NSGAIISampler study (ask + suggest + tell, the objective's
    time left out) on the same objective, whose every ask scans the whole study.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import bench_sweep
import optuna
from bench_sweep import sweep_rate, write_spec

from dse.analytical import estimate, summarize
from dse.mapping import Candidate
from dse.runner import load_spec
from dse.runner.stages import analytical_graph


def plain_nsga2_seconds(spec_path: Path, trials: int, repeat: int) -> float:
    """Median seconds of Optuna's own ask + suggest + tell over `trials` trials of a bare
    NSGA-II study on the sweep's objective (the analytical model's time left out)."""
    spec = load_spec(spec_path)
    graph = analytical_graph("mlp", {})
    times = []
    for _ in range(repeat):
        study = optuna.create_study(directions=["minimize", "minimize"],
                                    sampler=optuna.samplers.NSGAIISampler(seed=1, population_size=50))
        spent = 0.0
        for _ in range(trials):
            started = time.perf_counter()
            trial = study.ask()
            params = spec.space.suggest(trial)  # Optuna's relative sampling runs at the first suggest
            spent += time.perf_counter() - started
            cand = Candidate(*spec.apply(params))
            total = summarize(estimate(graph, [cand]), [cand]).iloc[0]
            values = ([float(total["latency_cycles"]), float(total["private_sram_bytes"])] if total["feasible"]
                      else [float("inf")] * 2)
            started = time.perf_counter()
            study.tell(trial, values)
            spent += time.perf_counter() - started
        times.append(spent)
    return statistics.median(times)


def main() -> None:
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trials", type=int, nargs="+", default=[150, 300, 600, 1200])
    ap.add_argument("--banks-high", type=int, default=512, help="the bank-count knob's upper bound")
    ap.add_argument("--no-plain", action="store_true", help="skip plain Optuna's NSGA-II")
    args = ap.parse_args()
    bench_sweep.SPEC = bench_sweep.SPEC.replace("high = 32", f"high = {args.banks_high}")
    rows = []
    for trials in args.trials:
        seconds, evaluated, _, split = sweep_rate("nsga2", trials, args.repeat)
        plain = float("nan")
        if not args.no_plain:
            with tempfile.TemporaryDirectory() as tmp:
                plain = plain_nsga2_seconds(write_spec(Path(tmp), "nsga2", trials), trials, args.repeat)
        proposals = split["proposals"]
        rows.append({"trials": trials, "evaluated": evaluated, "sweep": seconds,
                     "proposals/trial": proposals / trials, "optuna ms/proposal": 1e3 * split["sampler"] / proposals,
                     "optuna ms/trial": 1e3 * split["sampler"] / trials,
                     "dse ms/trial": 1e3 * (seconds - split["sampler"]) / trials,
                     "record ms/trial": 1e3 * split["record"] / trials, "plain optuna ms/trial": 1e3 * plain / trials})
    base = rows[0]
    print(f"banks 4..{args.banks_high}; median of {args.repeat} runs each; (ratio to {base['trials']} trials)")
    columns = [c for c in base if c not in ("trials", "evaluated", "sweep")]
    print(f"{'trials':>6} {'evaluated':>9} {'sweep s':>8} " + " ".join(f"{c:>24}" for c in columns))
    for row in rows:
        cells = [f"{row[c]:.3f} ({row[c] / base[c]:.2f}x)" for c in columns]
        print(f"{row['trials']:>6} {row['evaluated']:>9} {row['sweep']:8.2f} " + " ".join(f"{c:>24}" for c in cells))


if __name__ == "__main__":
    main()
