"""Record-store benchmarks: batched metric inserts, and reads over a store of 100,000 runs.

    .venv/bin/python bench/bench_records.py            # SQLite in a temporary folder
    .venv/bin/python bench/bench_records.py --pg       # also a throwaway PostgreSQL server
    .venv/bin/python bench/bench_records.py --db postgresql://user@host/db   # a given store
    .venv/bin/python bench/bench_records.py --writes [--pg]   # sweep writes with/without latest_figures
    .venv/bin/python bench/bench_records.py --writes-against /tmp/main-head   # this tree's vs another's

Prints medians and their ratio to the targets of issue 7: batched metric inserts of at
least 5,000 rows/s on SQLite; `dse history` and a candidate DataFrame over 100,000 runs in
under a second each. Measures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# --writes-against runs this script again with DSE_BENCH_TREE naming the other tree: its
# dse is imported instead of this one's (the same workload, the other code).
TREE = Path(os.environ.get("DSE_BENCH_TREE", REPO))
sys.path.insert(0, str(TREE))
sys.path.insert(0, str(TREE / "tests"))

from sqlalchemy import insert  # noqa: E402

from dse.identity import content_hash  # noqa: E402
from dse.records import MetricIn, Store, latest  # noqa: E402
from dse.records import packed  # noqa: E402
from dse.records.checks import METRIC_COLUMNS, packs_of  # noqa: E402
from dse.records.schema import Candidate, Experiment, Run, utcnow  # noqa: E402

try:
    from dse.records import candidate_runs as runs_kept_by_writes  # noqa: E402 - 0017
except ImportError:  # a tree before 0017 (DSE_BENCH_TREE): triggers on run keep candidate_run
    runs_kept_by_writes = None



def as_stored(connection, rows: list[dict]) -> list[dict]:
    """Candidate rows with config and mapping (dicts) as the tree's candidate table takes
    them: from 0018 their canonical JSON texts' candidate_text ids, stored once each."""
    if not hasattr(Candidate, "config_id"):
        return rows
    from dse.identity import canonical_json
    from dse.records.writes import text_ids

    texts = [(canonical_json(r["config"]), canonical_json(r["mapping"])) for r in rows]
    ids = text_ids(connection, [t for pair in texts for t in pair])
    return [{**{k: v for k, v in r.items() if k not in ("config", "mapping")},
             "config_id": ids[config], "mapping_id": ids[mapping]} for r, (config, mapping) in zip(rows, texts)]


INSERT_TARGET_ROWS_PER_S = 5_000
READ_TARGET_S = 1.0


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def report(label: str, value: float, unit: str, target: float, higher_is_better: bool) -> None:
    ratio = value / target if higher_is_better else target / value
    verdict = "meets" if ratio >= 1 else "MISSES"
    print(f"  {label:<52} {value:>12,.3f} {unit:<7} target {target:,.0f} {unit}: x{ratio:,.1f} ({verdict})")


# ---- inserts ------------------------------------------------------------------------------


def bench_inserts(url: str, repeat: int) -> None:
    print(f"batched metric inserts ({_shown(url)})")
    with Store(url) as store:
        experiment = store.create_experiment("insert-bench", "h", [], "gemm", "w", "s", "s")
        candidate, _ = store.add_candidate(experiment, {"x": 1}, {}, "baseline")
        for batch in (5_000, 50_000):
            metrics = [MetricIn("emulator_cycles", "cycles", float(i), "cycles", scope="op",
                                scope_key=str(i)) for i in range(batch)]  # fmt: skip

            def one_run() -> None:
                store.finish_run(store.start_run(candidate, "emulator"), "ok", metrics)

            seconds = median_time(one_run, repeat)
            report(f"finish_run with {batch:,} metrics (one transaction)", batch / seconds, "rows/s",
                   INSERT_TARGET_ROWS_PER_S, True)  # fmt: skip
        small = [MetricIn("analytical", f"m{i}", float(i), "cycles") for i in range(10)]

        def many_runs() -> None:
            for _ in range(50):
                store.finish_run(store.start_run(candidate, "analytical"), "ok", small)

        seconds = median_time(many_runs, repeat)
        # Not the batched case: two transactions per run, shown for the per-run cost.
        print(f"  {'50 runs x 10 metrics (start_run + finish_run each)':<52} {500 / seconds:>12,.3f} rows/s"
              f"  ({seconds / 50 * 1000:.2f} ms per run; no target)")  # fmt: skip


def bench_sweep_writes(url: str, repeat: int, n: int = 2_000, batch: int = 200) -> None:
    """The sweep's batched write (add_candidates_and_start_runs finishing the previous batch,
    12 total metrics a run) with latest_figures (`latest.record`; latest_metric beside it
    from 0011 until 0016) and candidate_run (by 0011's triggers until 0017, then by the
    writes' own statements, `candidate_runs`) kept in the same transaction, against the same
    write without them (the store before 0011), interleaved; fresh candidates each round,
    then a rerun of them (new runs replacing every figure). On a tree before 0017 (run with
    DSE_BENCH_TREE), "without" drops the triggers (put back after each round)."""
    import importlib.util

    import dse.records.latest as latest_module
    from dse.records.store import MIGRATIONS_DIR

    runs_module = runs_kept_by_writes
    spec = importlib.util.spec_from_file_location("m0011", Path(MIGRATIONS_DIR) / "versions" / "0011_latest_metric.py")
    m0011 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m0011)
    kept_by = (runs_module.added, runs_module.changed) if runs_module is not None else None

    def candidate_run_kept(engine, on: bool) -> None:
        if runs_module is not None:
            runs_module.added, runs_module.changed = kept_by if on else (lambda *_, **__: None,) * 2
            return
        sqlite = engine.dialect.name == "sqlite"
        with engine.begin() as connection:
            if on:
                for statement in m0011.SQLITE_TRIGGERS if sqlite else m0011.POSTGRESQL_TRIGGERS:
                    connection.exec_driver_sql(statement)
            elif sqlite:
                connection.exec_driver_sql("DROP TRIGGER candidate_run_after_insert")
                connection.exec_driver_sql("DROP TRIGGER candidate_run_after_update")
            else:
                connection.exec_driver_sql("DROP TRIGGER candidate_run_kept ON run")
                connection.exec_driver_sql("DROP FUNCTION candidate_run_kept()")

    keep = latest_module.record
    variants = (("with latest_figures", keep, True), ("latest_figures only", keep, False),
                ("without (pre-0011)", lambda *_: None, False))  # (label, record, candidate_run kept)
    times: dict[str, list[float]] = {f"{rerun}{label}": [] for rerun in ("", "rerun, ") for label, _, _ in variants}
    names = NAMES
    with Store(url) as store:
        experiment = store.create_experiment("write-bench", "h", [], "gemm", "w", "s-w", "s-w")
        try:
            for round_ in range(repeat):
                for label, record, kept in variants:
                    latest_module.record = record
                    if not kept:
                        candidate_run_kept(store.engine, on=False)
                    for rerun, seconds in zip(("", "rerun, "), sweep_writes(store, experiment, f"{round_}-{label}",
                                                                          n, batch, names)):
                        times[rerun + label].append(seconds)
                    if not kept:
                        candidate_run_kept(store.engine, on=True)
        finally:
            latest_module.record = keep
    print(f"sweep writes: {n:,} candidates, batches of {batch}, {len(names)} total metrics a run ({_shown(url)})")
    for rerun in ("", "rerun, "):
        old = statistics.median(times[rerun + "without (pre-0011)"])
        for label in ("with latest_figures", "latest_figures only"):
            new = statistics.median(times[rerun + label])
            shown = (rerun or "new candidates, ") + (label + ", candidate_run" if label.startswith("with") else label)
            print(f"  {shown:<52} {n * len(names) / new:>12,.0f} rows/s"
                  f"  vs without {n * len(names) / old:,.0f} rows/s: x{new / old:.2f} the time")


NAMES = [f"m{i}" for i in range(12)]


def sweep_writes(store: Store, experiment: int, tag: str, n: int, batch: int, names: list[str]) -> tuple[float, float]:
    """Seconds to record a sweep of n new candidates the way the sweep driver does (batches
    of `batch`, each finishing the previous one's runs with len(names) total metrics), and
    then to rerun the same candidates (new runs replacing every figure)."""
    times = []
    for _ in ("new", "rerun"):
        start = time.perf_counter()
        pending: list = []
        for i in range(0, n, batch):
            rows = [{"config": {"i": j, "tag": tag}, "mapping": {}, "origin": "grid"} for j in range(i, i + batch)]
            out = store.add_candidates_and_start_runs(experiment, rows, "analytical", finish=pending)
            pending = [{"run_id": run, "status": "ok", "metrics": [
                MetricIn("analytical", name, float(run + k), "cycles") for k, name in enumerate(names)]}
                for _, _, run in out]
        store.finish_runs(pending)
        times.append(time.perf_counter() - start)
    return times[0], times[1]


def bench_writes_against(other: Path, repeat: int, n: int = 2_000, batch: int = 200) -> None:
    """The sweep's writes (`sweep_writes`) with this tree's dse against `other`'s (a `git
    archive` of main, say), each round one fresh SQLite store per tree, in a new process
    (the same interpreter and this very script, only the dse imported differs), the trees
    alternating round by round."""
    import json

    times: dict[str, list[tuple[float, float]]] = {"this tree": [], str(other): []}
    with tempfile.TemporaryDirectory(prefix="dse-bench-") as folder:
        for round_ in range(repeat):
            for label, tree in (("this tree", REPO), (str(other), other)):
                db = os.path.join(folder, f"{round_}-{len(times[label])}-{tree.name}.db")
                env = {**os.environ, "DSE_BENCH_TREE": str(tree), "DSE_EVIDENCE_DIR": os.path.join(folder, "ev")}
                done = subprocess.run([sys.executable, __file__, "--time-sweep-writes", db, "--n", str(n),
                                       "--batch", str(batch)], env=env, check=True, capture_output=True, text=True)
                times[label].append(tuple(json.loads(done.stdout.splitlines()[-1])))
    print(f"sweep writes: {n:,} candidates, batches of {batch}, {len(NAMES)} total metrics a run (SQLite), "
          f"median of {repeat}, this tree against {other}")
    for i, what in enumerate(("new candidates", "rerun")):
        mine = statistics.median(t[i] for t in times["this tree"])
        theirs = statistics.median(t[i] for t in times[str(other)])
        print(f"  {what:<16} this tree {mine:7.3f} s ({n * len(NAMES) / mine:9,.0f} rows/s)   "
              f"other {theirs:7.3f} s ({n * len(NAMES) / theirs:9,.0f} rows/s): x{mine / theirs:.2f} the time")


def time_sweep_writes(db: str, n: int, batch: int) -> None:
    """One `sweep_writes` on a fresh store, printed as JSON (for bench_writes_against)."""
    import json

    import dse

    assert Path(dse.__file__).resolve().is_relative_to(TREE.resolve()), (dse.__file__, TREE)
    with Store(db) as store:
        experiment = store.create_experiment("write-bench", "h", [], "gemm", "w", "s-w", "s-w")
        print(json.dumps(sweep_writes(store, experiment, "t", n, batch, NAMES)))


# ---- a store of 100,000 runs --------------------------------------------------------------


def populate(url: str, n_runs: int) -> str:
    """A store whose main experiment has n_runs / 2 candidates with two runs each (analytical
    and emulator), four metrics a run, plus 20 small experiments. Bulk inserts: the point is
    reading it back."""
    rng = random.Random(7)
    with Store(url) as store:
        for i in range(20):
            e = store.create_experiment(f"small-{i:02d}", "a small one", [], "mlp", "w", "s", f"s{i}")
            c, _ = store.add_candidate(e, {"i": i}, {}, "baseline")
            store.finish_run(store.start_run(c, "analytical"), "ok")
        big = store.create_experiment(
            "big", "many candidates", [{"expr": "latency_cycles < baseline_latency_cycles", "prose": ""}],
            "gemm", "w" * 64, "spec", "big",
        )  # fmt: skip
        n_candidates = n_runs // 2
        now = utcnow()
        with store.engine.begin() as connection:
            first = connection.execute(insert(Candidate).returning(Candidate.id), as_stored(connection, [
                {"experiment_id": big, "config": cfg, "mapping": mp, "origin": "grid", "diff": {},
                 "hash": content_hash({"config": cfg, "mapping": mp}), "created_at": now}
                for i in range(n_candidates)
                for cfg, mp in [({"banks": {"count": 8 + i % 57}, "cores": 1 + i // 57}, {"workers": 1 + i % 4})]
            ])).scalars().all()  # fmt: skip
            store_versions = {"python": "3.11", "dse": "0.1.0"}
            runs = []
            for candidate in first:
                for stage in ("analytical", "emulator"):
                    status = rng.choices(["ok", "infeasible", "failed"], [90, 8, 2])[0]
                    runs.append({
                        "candidate_id": candidate, "stage": stage, "status": status,
                        "reason": "needs more banks" if status == "infeasible" else None,
                        "error": "ValueError: x" if status == "failed" else None,
                        "started_at": now, "finished_at": now + timedelta(seconds=1),
                        "heartbeat_at": now, "host": "bench", "git_commit": "0" * 40,
                        "git_dirty": False, "versions": store_versions, "command": "bench",
                        "model_version": "m1", "emulator_version": "e1" if stage == "emulator" else None,
                    })  # fmt: skip
            run_ids = connection.execute(insert(Run).returning(Run.id, Run.stage, Run.status), runs).all()
            metrics = []
            for run_id, stage, status in run_ids:
                if status != "ok":
                    continue
                kind = "analytical" if stage == "analytical" else "emulator_cycles"
                for name, unit in (("latency_cycles", "cycles"), ("dma_bytes", "bytes"),
                                   ("peak_sram_bytes", "bytes"), ("compute_cycles", "cycles")):  # fmt: skip
                    metrics.append({"run_id": run_id, "kind": kind, "name": name, "unit": unit,
                                    "value": rng.uniform(1e3, 1e6), "scope": "total", "scope_key": ""})  # fmt: skip
            # one packed row a run (0015)
            packed.write(connection, packs_of([(m["run_id"], *(m[c] for c in METRIC_COLUMNS)) for m in metrics]))
            latest.rebuild(connection)  # what the store's own writes keep, for these bulk rows
            if runs_kept_by_writes is not None:  # (before 0017 triggers on run kept it)
                runs_kept_by_writes.rebuild(connection)
            connection.execute(
                Experiment.__table__.update().where(Experiment.id == big).values(baseline_candidate_id=first[0])
            )
    return "big"


def bench_reads(url: str, n_runs: int, repeat: int, cli_url: str) -> None:
    print(f"reads over a store of {n_runs:,} runs ({_shown(url)})")
    start = time.perf_counter()
    experiment = populate(url, n_runs)
    print(f"  (populated in {time.perf_counter() - start:.1f} s)")
    from dse.cli import main

    open_s = median_time(lambda: Store(url).close(), repeat)
    print(f"  {'open a store (schema current, crashed-run check)':<52} {open_s:>12,.3f} s")
    with Store(url) as store:
        total = int(store.experiments()["n_candidates"].sum())
        runs = sum(int(store.experiments()[f"n_{s}"].sum()) for s in ("ok", "infeasible", "failed"))
        print(f"  ({total:,} candidates, {runs:,} runs)")
        report("store.experiments() (what `dse history` reads)", median_time(store.experiments, repeat),
               "s", READ_TARGET_S, False)  # fmt: skip
        report("store.candidates('big') (50,000-row DataFrame)",
               median_time(lambda: store.candidates(experiment), repeat), "s", READ_TARGET_S, False)  # fmt: skip
        for label, read in (
            ("store.metric_table('big', 'analytical')", lambda: store.metric_table(experiment, "analytical")),
            ("store.runs('big') (100,000-row DataFrame)", lambda: store.runs(experiment)),
        ):  # fmt: skip
            print(f"  {label:<52} {median_time(read, repeat):>12,.3f} s       (no target)")

    def history_in_process() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            main(["history", "--db", cli_url])

    report("`dse history`, in process (open + read + print)", median_time(history_in_process, repeat),
           "s", READ_TARGET_S, False)  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def history_command() -> None:
        subprocess.run([sys.executable, "-m", "dse", "history", "--db", cli_url], env=env,
                       check=True, capture_output=True)  # fmt: skip

    report("`dse history`, a new process (imports included)", median_time(history_command, repeat),
           "s", READ_TARGET_S, False)  # fmt: skip
    bare = median_time(lambda: subprocess.run(
        [sys.executable, "-c", "import sqlalchemy.orm"], check=True), repeat)  # fmt: skip
    print(f"  {'  of which: python + import sqlalchemy.orm':<52} {bare:>12,.3f} s")


def _shown(url: str) -> str:
    return url.split("@")[-1] if "://" in url else "SQLite"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pg", action="store_true", help="also on a throwaway PostgreSQL server")
    parser.add_argument("--db", help="a PostgreSQL URL to use (an empty database) instead of SQLite")
    parser.add_argument("--writes", action="store_true", help="only the sweep writes with and without latest_figures")
    parser.add_argument("--writes-against", type=Path, metavar="TREE",
                        help="only the sweep writes, this tree's dse against TREE's (e.g. a git archive of main)")
    parser.add_argument("--time-sweep-writes", metavar="DB", help=argparse.SUPPRESS)  # one run of --writes-against
    parser.add_argument("--n", type=int, default=2_000, help="candidates of a sweep write (--writes-against)")
    parser.add_argument("--batch", type=int, default=200, help="candidates a batch (--writes-against)")
    args = parser.parse_args()
    if args.time_sweep_writes:
        time_sweep_writes(args.time_sweep_writes, args.n, args.batch)
        return
    if args.writes_against:
        bench_writes_against(args.writes_against, args.repeat, args.n, args.batch)
        return
    with tempfile.TemporaryDirectory(prefix="dse-bench-") as folder:
        os.environ.setdefault("DSE_EVIDENCE_DIR", os.path.join(folder, "evidence"))
        if args.writes:
            bench_sweep_writes(args.db or os.path.join(folder, "writes.db"), args.repeat)
            return
        if args.db:
            bench_inserts(args.db, args.repeat)
            bench_reads(args.db, args.runs, args.repeat, args.db)
            return
        bench_inserts(os.path.join(folder, "insert.db"), args.repeat)
        bench_sweep_writes(os.path.join(folder, "writes.db"), args.repeat)
        reads = os.path.join(folder, "reads.db")
        bench_reads(reads, args.runs, args.repeat, reads)
        if args.pg:
            from pg import throwaway_server

            with throwaway_server() as server:
                bench_inserts(server.url(server.create_database()), args.repeat)
                url = server.url(server.create_database())
                bench_reads(url, args.runs, args.repeat, url)


if __name__ == "__main__":
    main()
