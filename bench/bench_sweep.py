"""Sweep throughput, measured against plain Optuna in the same run.

    .venv/bin/python bench/bench_sweep.py [--repeat 3] [--trials 150]
    DSE_BENCH_TREE=/work/main .venv/bin/python bench/bench_sweep.py --no-emulator   # another tree's dse

Prints medians of several runs and ratios (the machine is shared and noisy: read the
ratios, not the absolute times):
  - analytical-only sweeps (grid, random) into a fresh SQLite store: candidates per second,
    store writes included;
  - plain Optuna with its own SQLite storage (random sampler), and in memory with the
    random sampler and 2-objective TPE, on the same analytical objective: trials per
    second, and the ratios (issue 35: the grid sweep >= 3x in-memory random);
  - SQLite alone: the grid sweep's records re-inserted (one executemany a table, one
    transaction): the floor under any recording of those rows (issue 35's 10,000/s);
  - dse's TPE and NSGA-II sweeps: the time their store writes take against the time
    Optuna's own sampling (ask + tell) takes in the same sweep (the recording overhead),
    and the whole sweep against plain in-memory Optuna on the same objective and trials;
    NSGA-II's overhead also at 2x and 4x the trials (its own cost grows with the generations);
  - with --sizes: the grid at three sizes (the bank-count knob's range widened: 2,320,
    4,800 and 9,920 candidates), and the line through their medians: a sweep's fixed cost
    (store open and close, the experiment, the baseline's own transaction, the proposal) and
    the rate of each candidate beyond it;
  - 1 vs 2 worker processes, for the analytical stage (same grid, pool start included;
    the driver evaluates cheap analytical batches itself, so 2 workers only add the pool's
    start) and for the emulator stage (medians of up to 3 runs).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna
import warnings

from timing import runs_of  # (bench/: this script's folder)

REPO = Path(__file__).resolve().parents[1]
# DSE_BENCH_TREE=/path/to/another/checkout: the same workload on that tree's dse (before/after).
sys.path.insert(0, os.environ.get("DSE_BENCH_TREE", str(REPO)))

from dse.analytical import estimate, summarize  # noqa: E402
from dse.mapping import Candidate  # noqa: E402
from dse.records import Store  # noqa: E402
from dse.runner import Sweep, load_spec, run_sweep  # noqa: E402
from dse.runner.execution import make_executor  # noqa: E402
from dse.runner.stages import analytical_graph  # noqa: E402

SPEC = """
[experiment]
name = "bench"
hypothesis = "throughput"

[workload]
recipe = "mlp"

[baseline]
chip = "goban"

[[space]]
name = "banks"
target = "chip.banks.count"
low = 4
high = 32

[[space]]
name = "rows"
target = "chip.banks.rows"
values = [128, 256, 512, 1024, 2048]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 2, 3, 4]

[[space]]
name = "dataflow"
target = "mapping.dataflow"
values = ["ws", "os"]

[[space]]
name = "double_buffer"
target = "mapping.double_buffer"
values = [true, false]

[[objectives]]
metric = "latency_cycles"

[[objectives]]
metric = "private_sram_bytes"

[search]
sampler = "{sampler}"
trials = {trials}
seed = 1
"""


def write_spec(folder: Path, sampler: str, trials: int, banks_high: int = 32) -> Path:
    path = folder / f"{sampler}-{banks_high}.toml"
    path.write_text(SPEC.replace("high = 32", f"high = {banks_high}").format(sampler=sampler, trials=trials))
    return path


def timed(fn, repeat: int) -> tuple[float, object]:
    """The median wall seconds of `fn()` over `repeat` runs, and what its last run returned."""
    got = runs_of(fn, repeat)
    return statistics.median(got.walls), got.last


GRAPH = None


def store_floor(repeat: int) -> tuple[float, int, int]:
    """What SQLite alone takes to store a grid sweep's records: the rows of every table the
    sweep wrote (candidates and their config and mapping texts (0018), runs, their packed
    metrics and layouts (0015), latest_figures (and its layouts from 0019),
    and latest_metric before 0016; candidate_run by its triggers before 0017, its rows
    inserted as the others from 0017) inserted again into a fresh store, one executemany a
    table in one transaction, nothing computed. Median seconds, candidates and rows."""
    import sqlite3

    with tempfile.TemporaryDirectory() as tmp:
        spec = load_spec(write_spec(Path(tmp), "grid", 1))
        executor = make_executor(GRAPH, 1)
        with Store(Path(tmp) / "source.db") as store:
            Sweep(spec, GRAPH, store, executor, progress=False).run()
        source = sqlite3.connect(Path(tmp) / "source.db")
        held = {r[0] for r in source.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        # latest_metric: on trees before 0016 (DSE_BENCH_TREE), which write it
        # candidate_run: its rows, unless the schema's triggers on run make them (before 0017)
        triggers = source.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'").fetchone()[0]
        tables = tuple(t for t in ("experiment", "candidate_text", "candidate", "run", "metric_layout", "run_metrics", "latest_metric",
                                   "figures_layout", "latest_figures", "candidate_run")
                       if t in held and (t != "candidate_run" or not triggers))
        rows = {t: source.execute(f"SELECT * FROM {t}").fetchall() for t in tables}
        columns = {t: [c[1] for c in source.execute(f"PRAGMA table_info({t})")] for t in tables}
        source.close()
        counter = iter(range(10**6))

        def insert_all():
            path = Path(tmp) / f"floor{next(counter)}.db"
            with Store(path):
                pass  # the schema (and its triggers before 0017), not timed
            db = sqlite3.connect(path, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            started = time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            for t in tables:
                db.executemany(f"INSERT INTO {t} ({', '.join(columns[t])}) VALUES "
                               f"({', '.join('?' * len(columns[t]))})", rows[t])
            db.execute("COMMIT")
            seconds = time.perf_counter() - started
            db.close()
            return seconds

        seconds = statistics.median(insert_all() for _ in range(repeat))
    return seconds, len(rows["candidate"]), sum(len(r) for r in rows.values())


def sweep_rate(sampler: str, trials: int, repeat: int, workers: int = 1, banks_high: int = 32
               ) -> tuple[float, int, float, dict]:
    """The sweep itself (store opened, candidates proposed, evaluated, recorded, decided);
    the workload is captured once beforehand, as its cost does not grow with candidates.
    Returns median seconds, candidates, candidates per second and the median of each of
    the sweep's own time splits (sampler, record, ...), and "cpu": the driver process's
    CPU seconds (what a loaded machine's wall time hides)."""
    global GRAPH
    GRAPH = GRAPH or analytical_graph("mlp", {})  # what run_sweep's analytical stage costs
    with tempfile.TemporaryDirectory() as tmp:
        spec = load_spec(write_spec(Path(tmp), sampler, trials, banks_high))
        counter = iter(range(10**6))
        splits: list[dict] = []

        def run():
            executor = make_executor(GRAPH, workers)
            cpu = time.process_time()
            try:
                with Store(Path(tmp) / f"r{next(counter)}.db") as store:
                    result = Sweep(spec, GRAPH, store, executor, progress=False).run()
                    splits.append({**result.seconds, "proposals": result.proposed_by_sampler,
                                   "cpu": time.process_time() - cpu})
                    return result
            finally:
                executor.close()

        seconds, result = timed(run, repeat)
    split = {k: statistics.median(s[k] for s in splits) for k in splits[0]}
    return seconds, result.evaluated, result.evaluated / seconds, split


EMU_SPEC = """
[experiment]
name = "emu"
hypothesis = "emulator stage throughput"

[workload]
recipe = "resnet18"
params = { size = 32, classes = 10 }

[baseline]
chip = "goban"

[[space]]
name = "banks"
target = "chip.banks.count"
values = [12, 14, 16, 18, 20, 22, 24, 26]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 2, 3, 4]

[[objectives]]
metric = "latency_cycles"

[stages]
emulator = "all"
"""


def emulator_stage_time(workers: int, repeat: int) -> tuple[float, int]:
    """The emulator stage's wall time in a sweep whose every feasible candidate is emulated
    (the workers already started by the analytical stage)."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "emu.toml"
        spec.write_text(EMU_SPEC)
        counter = iter(range(10**6))
        stage_times = []

        def run():
            result = run_sweep(spec, Path(tmp) / f"e{next(counter)}.db", progress=False, workers=workers)
            stage_times.append(result.seconds["emulator"])

        timed(run, repeat)
        with Store(Path(tmp) / "e0.db") as store:
            runs = store.runs("emu")
        n = int(((runs["stage"] == "emulator") & (runs["status"] == "ok")).sum())
    return statistics.median(stage_times), n


def objective_factory(spec_path: Path):
    spec = load_spec(spec_path)
    graph = analytical_graph("mlp", {})
    space = spec.space

    def objective(trial):
        params = space.suggest(trial)
        chip, mapping = spec.apply(params)
        cand = Candidate(chip, mapping)
        total = summarize(estimate(graph, [cand]), [cand]).iloc[0]
        if not total["feasible"]:
            return float("inf"), float("inf")
        return float(total["latency_cycles"]), float(total["private_sram_bytes"])

    return objective


def plain_optuna(objective, trials: int, repeat: int, storage: str | None, sampler_kind: str) -> float:
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def run():
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{tmp}/optuna.db" if storage == "sqlite" else None
            sampler = (optuna.samplers.NSGAIISampler(seed=1) if sampler_kind == "nsga2"
                       else optuna.samplers.TPESampler(seed=1, multivariate=True, group=True, n_startup_trials=8)
                       if sampler_kind == "tpe"
                       else optuna.samplers.RandomSampler(seed=1))
            study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler, storage=url)
            study.optimize(objective, n_trials=trials)

    seconds, _ = timed(run, repeat)
    return seconds


SIZES = (32, 63, 127)  # the bank-count knob's upper bound: 2,320, 4,800 and 9,920 candidates


def sizes() -> None:
    """The grid sweep at each of SIZES (rounds alternating the sizes, so that a noisy spell
    falls on all of them), then the least-squares line wall = fixed + candidates x each."""
    repeat = 5
    walls: dict[int, list[float]] = {high: [] for high in SIZES}
    counts: dict[int, int] = {}
    for _ in range(repeat):
        for high in SIZES:
            seconds, n, _, _ = sweep_rate("grid", 1, 1, banks_high=high)
            walls[high].append(seconds)
            counts[high] = n
    xs = [counts[high] for high in SIZES]
    ys = [statistics.median(walls[high]) for high in SIZES]
    slope, fixed = statistics.linear_regression(xs, ys)
    for n, wall in zip(xs, ys):
        print(f"grid sweep of {n:>6,} candidates: median {wall:.3f} s = {n / wall:>7,.0f} recorded cand/s")
    print(f"fitted: {fixed * 1e3:.0f} ms a sweep whatever its size, then {slope * 1e6:.1f} us a candidate = "
          f"{1 / slope:,.0f} cand/s beyond it (issue 35's target 10,000/s); medians of {repeat} rounds")


def main() -> None:
    # TPE's multivariate/group options are marked experimental: say so once, not per study
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trials", type=int, default=150)
    ap.add_argument("--no-emulator", action="store_true", help="skip the emulator stage's 1 vs 2 workers")
    ap.add_argument("--grid-only", action="store_true",
                    help="the grid sweep alone: median wall, candidates/s and driver CPU of --repeat sweeps (quick "
                         "before/after rounds with DSE_BENCH_TREE, alternating trees)")
    ap.add_argument("--sizes", action="store_true",
                    help="the grid sweep at 2,320, 4,800 and 9,920 candidates: each one's rate, and a sweep's fixed "
                         "cost and the marginal rate fitted through them")
    args = ap.parse_args()
    if args.sizes:
        sizes()
        return
    if args.grid_only:
        s, n, rate, split = sweep_rate("grid", 1, args.repeat)
        print(f"{os.environ.get('DSE_BENCH_TREE', REPO)}: grid sweep {n} candidates, median {s:.3f} s = {rate:,.0f} "
              f"recorded cand/s, driver CPU median {split['cpu']:.3f} s")
        return
    rows = []

    t = time.perf_counter()
    analytical_graph("mlp", {})
    rows.append(("capture + frontend steps of mlp (once per sweep)", 1, time.perf_counter() - t, 0.0))
    s, grid_n, grid_rate, grid_split = sweep_rate("grid", 1, args.repeat)
    n = grid_n
    rows.append(("dse grid sweep (analytical, SQLite)", n, s, grid_rate))
    s, n, random_rate, _ = sweep_rate("random", 2000, args.repeat)
    rows.append(("dse random sweep (analytical, SQLite)", n, s, random_rate))

    with tempfile.TemporaryDirectory() as tmp:
        objective = objective_factory(write_spec(Path(tmp), "tpe", args.trials))
    floor_s, floor_n, floor_rows = store_floor(args.repeat)
    rows.append((f"SQLite alone: the grid's {floor_rows:,} rows re-inserted", floor_n, floor_s, floor_n / floor_s))
    s_random = plain_optuna(objective, args.trials, args.repeat, None, "random")
    random_plain_rate = args.trials / s_random
    rows.append(("plain Optuna in memory, random (same objective)", args.trials, s_random, random_plain_rate))
    sqlite_trials = 60
    s_sql = plain_optuna(objective, sqlite_trials, args.repeat, "sqlite", "random")
    sqlite_rate = sqlite_trials / s_sql
    rows.append(("plain Optuna, its own SQLite storage (random)", sqlite_trials, s_sql, sqlite_rate))
    plain, dse_runs = {}, {}
    for kind in ("tpe", "nsga2"):
        s_mem = plain_optuna(objective, args.trials, args.repeat, None, kind)
        plain[kind] = s_mem
        rows.append((f"plain Optuna in memory, 2-objective {kind}", args.trials, s_mem, args.trials / s_mem))
        s_dse, n_dse, r_dse, split = sweep_rate(kind, args.trials, args.repeat)
        dse_runs[kind] = (s_dse, split)
        rows.append((f"dse {kind} sweep (recorded in SQLite)", n_dse, s_dse, r_dse))
    tpe_rate = args.trials / plain["tpe"]
    # NSGA-II's own cost grows with the generations it has seen (its sorting), while the
    # recording per candidate does not: the overhead at a longer budget as well.
    longer = {t: sweep_rate("nsga2", t, args.repeat)[3] for t in (2 * args.trials, 4 * args.trials)}
    s1, n1, _, _ = sweep_rate("grid", 1, args.repeat, workers=1)
    s2, n2, _, _ = sweep_rate("grid", 1, args.repeat, workers=2)
    if not args.no_emulator:
        emulator_repeat = min(args.repeat, 3)  # a resnet18 emulator sweep takes seconds
        e1, en = emulator_stage_time(1, emulator_repeat)
        e2, _ = emulator_stage_time(2, emulator_repeat)

    print(f"{'what':<48} {'count':>6} {'median s':>9} {'per s':>9}")
    for what, n, s, rate in rows:
        print(f"{what:<48} {n:>6} {s:>9.3f} {rate:>9.1f}")
    print()
    print(f"issue 35: grid sweep {grid_rate:,.0f} recorded cand/s (target >= 10,000) = "
          f"{grid_rate / random_plain_rate:.1f}x plain in-memory Optuna random ({random_plain_rate:,.0f} trials/s; "
          f"target >= 3x); SQLite alone stores the same records at {floor_n / floor_s:,.0f} cand/s "
          f"({floor_rows / floor_s:,.0f} rows/s), the sweep at {grid_rate / (floor_n / floor_s):.2f}x that; "
          f"the grid sweep's CPU {grid_split['cpu']:.3f} s = {grid_n / grid_split['cpu']:,.0f} cand/s "
          "of the driver's CPU")
    print(f"grid sweep:   {grid_rate:7.0f} cand/s = {grid_rate / sqlite_rate:5.0f}x plain Optuna+SQLite "
          f"({sqlite_rate:.1f} trials/s), {grid_rate / tpe_rate:5.1f}x plain in-memory 2-objective TPE "
          f"({tpe_rate:.0f} trials/s)")
    print(f"random sweep: {random_rate:7.0f} cand/s = {random_rate / sqlite_rate:5.0f}x plain Optuna+SQLite, "
          f"{random_rate / tpe_rate:5.1f}x plain in-memory 2-objective TPE")
    for kind, (s_dse, split) in dse_runs.items():
        print(f"dse {kind}: recording {split['record']:.3f} s = {100 * split['record'] / split['sampler']:.0f}% of "
              f"Optuna's own sampling (ask + tell) {split['sampler']:.3f} s in the same sweep; whole sweep "
              f"{s_dse:.2f} s = {s_dse / plain[kind]:.2f}x plain in-memory Optuna {kind} ({plain[kind]:.2f} s, "
              f"same objective, same trials)")
    for t, split in longer.items():
        print(f"dse nsga2 at {t} trials: recording {split['record']:.3f} s = "
              f"{100 * split['record'] / split['sampler']:.0f}% of Optuna's own sampling {split['sampler']:.3f} s")
    print(f"analytical grid sweep, 2 workers vs 1: {s1 / s2:.2f}x faster ({n1} candidates, {s1:.2f} s vs {s2:.2f} s)")
    if not args.no_emulator:
        print(f"emulator stage ({en} resnet18 candidates emulated), 2 workers vs 1: {e1 / e2:.2f}x faster "
              f"({e1:.2f} s vs {e2:.2f} s, medians of {emulator_repeat})")


if __name__ == "__main__":
    main()
