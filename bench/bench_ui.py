"""`dse ui` and `dse report` on a store of 100,000 candidates.

    .venv/bin/python bench/bench_ui.py                 # SQLite in a temporary folder
    .venv/bin/python bench/bench_ui.py --pg            # also a throwaway PostgreSQL server
    .venv/bin/python bench/bench_ui.py --candidates 20000 --repeat 3
    .venv/bin/python bench/bench_ui.py --db /tmp/ui-big.db    # keep the store for the next run
    .venv/bin/python bench/bench_ui.py --db /tmp/ui-big.db --report-only --repeat 3 --report-against /work/main
    DSE_BENCH_TREE=/work/main .venv/bin/python bench/bench_ui.py --db /tmp/ui-big.db   # another tree's dse

Serves the real app with uvicorn on a loopback port and times whole HTTP requests (server
side: no browser): the experiment page, a sorted + filtered candidate page, a late page of
the sort, the Pareto plot's data; then `write_report` on the same store, with its peak
memory (the child process's own peak resident size, VmHWM). Prints medians and the ratio to issue 17's
targets (pages < 0.5 s, report < 10 s and < 1 GB; issue 35's: the sorted, filtered page
< 0.3 s, the report < 5 s). A page's first request after the records change computes what
the workbench keeps for them (`dse.ui.memo`): shown apart. Measures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
# DSE_BENCH_TREE=/path/to/another/checkout: that tree's dse on the same store (before/after).
TREE = os.environ.get("DSE_BENCH_TREE", str(REPO))
sys.path.insert(0, TREE)

from bench_records import as_stored, median_time  # noqa: E402
from sqlalchemy import insert  # noqa: E402

from dse.identity import content_hash  # noqa: E402
from dse.records import Store, latest, reads  # noqa: E402
from dse.records import packed  # noqa: E402
from dse.records.checks import METRIC_COLUMNS, packs_of  # noqa: E402
from dse.records.schema import Candidate, Experiment, Run, utcnow  # noqa: E402

try:
    from dse.records import candidate_runs  # noqa: E402 - 0017: kept by the writes of runs
except ImportError:  # a tree before 0017 (DSE_BENCH_TREE): kept by triggers
    candidate_runs = None

PAGE_TARGET_S = 0.3  # issue 35 (issue 17: 0.5)
REPORT_TARGET_S = 5.0  # issue 35 (issue 17: 10)
REPORT_TARGET_MB = 1024.0
SPEC_TEXT = """
[[objectives]]
metric = "latency_cycles"
[[objectives]]
metric = "private_sram_bytes"
"""
OPS = ("matmul_1", "relu_1", "matmul_2")
COMPONENTS = ("private_sram", "matrix", "relu", "cores", "dma", "dram")
UNITS = {"area_mm2": "mm2", "energy_uj": "uJ", "power_mw": "mW"}



def report(label: str, seconds: float, target: float, unit: str = "s") -> None:
    verdict = "meets" if seconds <= target else "MISSES"
    print(f"  {label:<58} {seconds:>9.3f} {unit}  target {target:g} {unit}: x{target / seconds:,.1f} ({verdict})")


def populate(url: str, n: int) -> None:
    """One experiment of n candidates (a grid over banks, rows and workers), each with an
    analytical run: 90% ok with the spec's total metrics, area, energy and power (totals, by
    component, per op) and per-op cycles, the rest infeasible with a reason. Bulk inserts:
    the point is reading it back."""
    rng = random.Random(17)
    with Store(url) as store:
        exp = store.create_experiment(
            "big", "many candidates", [{"expr": "latency_cycles <= baseline_latency_cycles / 1.5 and "
                                                "private_sram_bytes <= baseline_private_sram_bytes", "prose": ""}],
            "mlp", "w" * 64, SPEC_TEXT, "big")  # fmt: skip
        now = utcnow()
        with store.engine.begin() as connection:
            rows = []
            for i in range(n):
                banks, rows_, workers = 4 + i % 29, 128 << (i // 29 % 5), 1 + i // 145 % 4
                cfg, mp = {"banks": {"count": banks, "rows": rows_}, "tag": i}, {"workers": workers}
                diff = {} if i == 0 else {"config.banks.count": [4, banks], "config.banks.rows": [128, rows_],
                                          "mapping.workers": [1, workers]}  # fmt: skip
                rows.append({"experiment_id": exp, "config": cfg, "mapping": mp, "origin": "baseline" if i == 0 else "grid",
                             "diff": diff, "hash": content_hash({"config": cfg, "mapping": mp}), "created_at": now})
            ids = connection.execute(insert(Candidate).returning(Candidate.id), as_stored(connection, rows)).scalars().all()
            runs = []
            for j, cid in enumerate(ids):
                status = "ok" if j == 0 or rng.random() < 0.9 else "infeasible"
                runs.append({"candidate_id": cid, "stage": "analytical", "status": status,
                             "reason": "needs 12 banks, chip has 8" if status == "infeasible" else None,
                             "started_at": now, "finished_at": now + timedelta(seconds=1), "heartbeat_at": now,
                             "host": "bench", "git_commit": "0" * 40, "git_dirty": False, "versions": {},
                             "command": "bench", "model_version": "m1"})  # fmt: skip
            run_rows = connection.execute(insert(Run).returning(Run.id, Run.status), runs).all()
            metrics = []
            for run_id, status in run_rows:
                if status != "ok":
                    continue
                latency = rng.uniform(1e5, 1e7)
                sram = rng.choice([64, 128, 256, 512]) * 1024 * rng.randint(1, 20)
                # what the candidate costs (dse.ppa), as a sweep records it: totals, by component, per op
                parts = {c: (rng.uniform(0.01, 0.5), rng.uniform(1.0, 2000.0)) for c in COMPONENTS}
                area, energy = sum(a for a, _ in parts.values()), sum(e for _, e in parts.values())
                values = {"latency_cycles": latency, "compute_cycles": latency * 0.6, "dma_cycles": latency * 0.3,
                          "core_cycles": latency * 0.1, "dma_bytes": rng.uniform(1e5, 1e7), "peak_sram_bytes": sram * 0.8,
                          "private_sram_bytes": sram, "private_sram_per_core_bytes": sram / 4,
                          "area_mm2": area, "energy_uj": energy, "power_mw": energy / latency * 1e6}  # fmt: skip
                for name, value in values.items():
                    metrics.append({"run_id": run_id, "kind": "analytical", "name": name, "value": value,
                                    "unit": UNITS.get(name, "bytes" if "bytes" in name else "cycles"), "scope": "total",
                                    "scope_key": ""})
                for op in OPS:
                    metrics.append({"run_id": run_id, "kind": "analytical", "name": "cycles", "value": latency / 3,
                                    "unit": "cycles", "scope": "op", "scope_key": op})
                    metrics.append({"run_id": run_id, "kind": "analytical", "name": "energy_uj", "value": energy / 3,
                                    "unit": "uJ", "scope": "op", "scope_key": op})
                for component, (a, e) in parts.items():
                    metrics.append({"run_id": run_id, "kind": "analytical", "name": "area_mm2", "value": a,
                                    "unit": "mm2", "scope": "component", "scope_key": component})
                    metrics.append({"run_id": run_id, "kind": "analytical", "name": "energy_uj", "value": e,
                                    "unit": "uJ", "scope": "component", "scope_key": component})
            # one packed row a run (0015)
            packed.write(connection, packs_of([(m["run_id"], *(m[c] for c in METRIC_COLUMNS)) for m in metrics]))
            latest.rebuild(connection)  # what the store's own writes keep, for these bulk rows
            if candidate_runs is not None:  # (before 0017 triggers on run kept it)
                candidate_runs.rebuild(connection)
            connection.execute(Experiment.__table__.update().where(Experiment.id == exp)
                               .values(baseline_candidate_id=ids[0], status="testing"))  # fmt: skip


def serve(url: str):
    import uvicorn

    from dse.ui import create_app
    from dse.ui.server import bind

    store = Store(url)
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(store), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    for _ in range(200):
        try:
            urllib.request.urlopen(base + "/", timeout=5).read()
            break
        except OSError:
            time.sleep(0.1)
    return base, server, thread, store


def fetch(url: str) -> int:
    with urllib.request.urlopen(url, timeout=120) as response:
        return len(response.read())


def bench_pages(url: str, repeat: int, n: int) -> None:
    base, server, thread, store = serve(url)
    try:
        for label, path in (
            ("experiment page (first 50 by id)", "/experiments/1"),
            ("sorted + filtered page (ok, latency <= 5e6, by latency desc)",
             "/experiments/1?sort=latency_cycles&order=desc&status=ok&metric=latency_cycles&max=5000000"),
            ("text filter + sort by SRAM, page 40", "/experiments/1?q=workers%3D4&sort=private_sram_bytes&page=40"),
            ("candidate page", "/candidates/5000"),
        ):  # fmt: skip
            started = time.perf_counter()
            fetch(base + path)  # the first request: compiles the templates, computes what the memo keeps
            first = time.perf_counter() - started
            report(label, median_time(lambda: fetch(base + path), repeat), PAGE_TARGET_S)
            print(f"  {'  its first request (nothing kept yet)':<58} {first:>9.3f} s")
        for label, path in (("Pareto plot data, every candidate", "/experiments/1/pareto.json"),
                            ("parallel coordinates data", "/experiments/1/parallel.json"),
                            ("cycles per op (baseline, best, accepted)", "/experiments/1/ops.json"),
                            ("energy per op (baseline, best, accepted)", "/experiments/1/ops.json?metric=energy_uj"),
                            ("area and energy by component (analytical)", "/experiments/1/components.json"),
                            ("latency vs energy Pareto plot data", "/experiments/1/pareto.json?x=energy_uj&y=latency_cycles"),
                            ("candidate page's by-component bars", "/candidates/5000/components.json"),
                            ("model vs emulator (no emulator run here)", "/experiments/1/model-vs-emulator.json"),
                            ("live view poll (after the last 20 candidates)", f"/experiments/1/live.json?after={n - 20}")):
            size = fetch(base + path)
            seconds = median_time(lambda: fetch(base + path), max(1, repeat // 2))
            print(f"  {label + ' (' + format(size / 1e6, '.2f') + ' MB JSON)':<58} {seconds:>9.3f} s  (no target)")
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        store.close()


def bench_page_queries(url: str, repeat: int) -> None:
    """The sorted + filtered page's query ranked by the reference (dse.ui.queries.ranked_ids:
    each candidate's latest analytical run from candidate_run and its figures unpacked from
    latest_figures, sorted in Python), against the same page read from the runs and the metric rows (the way
    before migration 0011), interleaved; both must give the same page. Then the page as the
    UI ranks it, in memory from one read (queries.rankable) through the store's contract."""
    from dse.ui import queries

    page = queries.CandidateQuery(sort="latency_cycles", descending=True, status="ok", metric="latency_cycles",
                                  high=5e6)
    # A tree before the UI's reads went behind the store's contract: its queries on a connection.
    contract = hasattr(queries, "reference_page")
    times = {False: [], True: []}
    with Store(url) as store, store.engine.connect() as connection:
        baseline = store.experiment(1)["baseline_candidate_id"]
        names = store.metric_names(1, baseline) if contract else queries.metric_names(connection, 1, baseline)
        pages = {}
        for _ in range(repeat):
            for through_runs in (False, True):
                start = time.perf_counter()
                if contract:
                    pages[through_runs] = queries.reference_page(store, 1, page, names, through_runs=through_runs)
                else:
                    pages[through_runs] = queries.candidate_page(connection, 1, page, names, through_runs=through_runs)
                times[through_runs].append(time.perf_counter() - start)
        assert (pages[False].rows, pages[False].total) == (pages[True].rows, pages[True].total)
    new, old = (statistics.median(times[k]) for k in (False, True))
    print(f"  {'candidate_page query, sorted + filtered (0011 tables)':<58} {new:>9.3f} s  "
          f"vs from the runs and metric rows {old:.3f} s: x{new / old:.2f}")
    if not hasattr(queries, "rankable"):  # a tree before the in-memory ranking
        return
    # The page's ranking in memory (queries.ranked, what the UI does on a new sort or filter)
    # from the read it keeps per state of the records (queries.rankable), against the
    # reference's (ranked_ids), interleaved; both must give the same order.
    times = {"read": [], "ranked": [], "ranked_ids": []}
    with Store(url) as store, store.engine.connect() as connection:
        for _ in range(repeat):
            start = time.perf_counter()
            table = queries.rankable(store if contract else connection, 1, names)
            times["read"].append(time.perf_counter() - start)
            start = time.perf_counter()
            mine = queries.ranked(table, page, names)
            times["ranked"].append(time.perf_counter() - start)
            start = time.perf_counter()
            theirs = queries.ranked_ids(connection, 1, page, names)
            times["ranked_ids"].append(time.perf_counter() - start)
            assert mine.tolist() == theirs.tolist()
    read, ranked, sql = (statistics.median(times[k]) for k in ("read", "ranked", "ranked_ids"))
    print(f"  {'  its ranking in memory (queries.ranked)':<58} {ranked:>9.3f} s  vs the reference's {sql:.3f} s: "
          f"x{ranked / sql:.3f} (the read it ranks from, once a state: {read:.3f} s)")
    if contract:  # the page's 50 rows through the store's contract, as the UI reads them
        with Store(url) as store:
            rows = median_time(lambda: queries.page_of(store, mine, page, names), repeat)
        print(f"  {'  its 50 rows (PageReader.page_rows)':<58} {rows:>9.3f} s")


def bench_outcome_counts(url: str, repeat: int) -> None:
    """An experiment's candidates by outcome (paid by every experiment page and live
    poll) from candidate_run's index, against the count from the runs (before 0011),
    interleaved; both must agree."""
    times = {"candidate_run": [], "from the runs (pre-0011)": []}
    with Store(url) as store, store.engine.connect() as connection:
        counts = {}
        for _ in range(repeat):
            for label, read in (("candidate_run", reads.outcome_counts),
                                ("from the runs (pre-0011)", reads.outcome_counts_from_runs)):
                start = time.perf_counter()
                counts[label] = read(connection, 1)
                times[label].append(time.perf_counter() - start)
        assert counts["candidate_run"] == counts["from the runs (pre-0011)"], counts
    new, old = (statistics.median(t) for t in times.values())
    print(f"  {'outcome counts of the experiment (candidate_run)':<58} {new:>9.3f} s  "
          f"vs from the runs {old:.3f} s: x{new / old:.2f}")


# The child's peak is its own address space's (VmHWM): ru_maxrss survives fork and exec on
# Linux, so a child's would be at least this process's peak (the populated store's 1.2 GB).
# Its CPU time counts the report's own child processes (dse.report.aside) with its own, and so
# does its memory's second figure: the proportional set sizes (shared pages split, not counted
# twice) of it and its children summed, sampled every 0.1 s (reading them costs CPU the report
# would be charged).
REPORT_CHILD = """
import os, resource, sys, threading, time
sys.path.insert(0, {repo!r})
from dse.records import Store
from dse.report import write_report
def cpu():
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))
def pss(pid):
    try:
        return next(int(l.split()[1]) for l in open(f"/proc/{{pid}}/smaps_rollup") if l.startswith("Pss:"))
    except OSError:  # a child that has just ended
        return 0
tree_peak, done = [0], threading.Event()
def sample():
    me = os.getpid()
    while not done.wait(0.1):
        children = open(f"/proc/{{me}}/task/{{me}}/children").read().split()
        if children:  # alone, its peak is VmHWM's (free to read, where this walks its page tables)
            tree_peak[0] = max(tree_peak[0], sum(map(pss, [me, *children])))
sampler = threading.Thread(target=sample, daemon=True)
sampler.start()
start, started = time.perf_counter(), cpu()
with Store({url!r}) as store:
    write_report(store, "big", {out!r})
elapsed, used = time.perf_counter() - start, cpu() - started
done.set()
sampler.join()
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(elapsed, peak / 1024, used, max(tree_peak[0], peak) / 1024)
"""


def bench_report(url: str, repeat: int, out: str, against: str | None = None) -> None:
    """`write_report` in a child, `repeat` times; `against`: another checkout's too, the two
    interleaved (before/after under the same load), with the ratio."""
    trees = [TREE, *([against] if against else [])]
    times: dict[str, list[float]] = {tree: [] for tree in trees}
    peaks: dict[str, list[float]] = {tree: [] for tree in trees}
    cpus: dict[str, list[float]] = {tree: [] for tree in trees}
    with_children: dict[str, list[float]] = {tree: [] for tree in trees}
    for _ in range(repeat):
        for tree in trees:
            code = REPORT_CHILD.format(repo=tree, url=url, out=out)
            line = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
            times[tree].append(float(line[0]))
            peaks[tree].append(float(line[1]))
            cpus[tree].append(float(line[2]))
            with_children[tree].append(float(line[3]))
    report("dse report (write_report: HTML + Markdown), in a child", statistics.median(times[TREE]), REPORT_TARGET_S)
    print(f"  {'  its CPU time (with its own child processes)':<58} {statistics.median(cpus[TREE]):>9.3f} s")
    report("  its peak memory (VmHWM, imports included)", statistics.median(peaks[TREE]), REPORT_TARGET_MB, "MB")
    report("  with its child processes (summed PSS, sampled)", statistics.median(with_children[TREE]),
           REPORT_TARGET_MB, "MB")
    if against:
        base, base_peak, base_cpu = (statistics.median(m[against]) for m in (times, peaks, cpus))
        print(f"  {'  ' + against + ', interleaved':<58} {base:>9.3f} s, {base_cpu:.3f} s CPU, {base_peak:.0f} MB: "
              f"this tree x{statistics.median(times[TREE]) / base:.2f} the time, "
              f"x{statistics.median(cpus[TREE]) / base_cpu:.2f} the CPU")


def bench_fetch(url: str, repeat: int) -> None:
    """candidate_metrics (every candidate's total metrics: the report's and the figures' read,
    `dse.records.report_reads`) with rows fetched from the driver's cursor (the Store's way of
    running its SQL, `reads.text_runner`), against SQLAlchemy's Row objects (the former way),
    interleaved in this run."""
    from sqlalchemy import text

    from dse.runner.metrics import METRICS

    try:
        from dse.records.report_reads import candidate_metrics
    except ImportError:  # a tree from before the report's reads joined the store's contract
        print("  (candidate_metrics: not a Store read in this tree)")
        return

    def rows_fetched(connection):
        def run(sql, params):
            result = connection.execute(text(sql), params)
            return list(result.keys()), result.fetchall()

        return run

    times = {"driver cursor": [], "SQLAlchemy rows": []}
    with Store(url) as store, store.engine.connect() as connection:
        for _ in range(repeat):
            for label, runner in (("driver cursor", reads.text_runner), ("SQLAlchemy rows", rows_fetched)):
                start = time.perf_counter()
                candidate_metrics(runner(connection), 1, list(METRICS))
                times[label].append(time.perf_counter() - start)
    new, old = statistics.median(times["driver cursor"]), statistics.median(times["SQLAlchemy rows"])
    print(f"  {'candidate_metrics, every metric (driver cursor)':<58} {new:>9.3f} s  "
          f"vs SQLAlchemy rows {old:.3f} s: x{new / old:.2f}")


def run(url: str, n: int, repeat: int, folder: str, label: str, filled: bool = False, with_report: bool = True,
        pages: bool = True, against: str | None = None) -> None:
    print(f"{label}: {n:,} candidates")
    if not filled:
        start = time.perf_counter()
        populate(url, n)
        print(f"  (populated in {time.perf_counter() - start:.1f} s)")
    if pages:
        bench_pages(url, repeat, n)
        bench_page_queries(url, repeat)
        bench_outcome_counts(url, repeat)
    if with_report:
        if pages:
            bench_fetch(url, repeat)
        bench_report(url, max(1, repeat // 2) if pages else repeat, os.path.join(folder, "reports"), against)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--pg", action="store_true", help="also on a throwaway PostgreSQL server")
    parser.add_argument("--db", help="a SQLite file to reuse (populated first if it does not exist)")
    parser.add_argument("--no-report", action="store_true", help="pages only")
    parser.add_argument("--report-only", action="store_true", help="the report only (--repeat times)")
    parser.add_argument("--report-against", metavar="TREE",
                        help="also another checkout's report, interleaved with this tree's (before/after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dse-bench-ui-") as folder:
        os.environ.setdefault("DSE_EVIDENCE_DIR", os.path.join(folder, "evidence"))
        db = args.db or os.path.join(folder, "big.db")
        run(db, args.candidates, args.repeat, folder, "SQLite", filled=os.path.exists(db), with_report=not args.no_report,
            pages=not args.report_only, against=args.report_against)
        if args.pg:
            from pg import throwaway_server

            with throwaway_server() as server:
                run(server.url(server.create_database()), args.candidates, args.repeat, folder, "PostgreSQL")
    print(f"(peak memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")


if __name__ == "__main__":
    main()
