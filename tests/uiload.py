"""A bounded load on a real `dse ui` while a real sweep writes to the same store: shared by
tests/test_ui_trust.py (small) and bench/bench_ui_load.py (2,000 requests, 16 clients).

Clients are threads with one keep-alive HTTP connection each; the requests are a mix of
what a team's browsers ask (the page of the running sweep polling its live.json, candidate
and run pages, the experiment list and page, comparisons) and hostile URLs that must be
refused with 400.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from uiserver import REPO, SPEC

# The sweep under load: the MLP on goban, 24 candidates (as the UI tests' first experiment).
LOAD_SPEC_NAME = "under-load"


@dataclass
class Load:
    statuses: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)  # seconds, one a request
    failures: list[str] = field(default_factory=list)  # 5xx, Python text, dropped connections
    seconds: float = 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    def summary(self) -> str:
        return (f"{len(self.latencies)} requests in {self.seconds:.1f} s ({len(self.latencies) / self.seconds:.0f}/s): "
                f"p50 {1000 * self.percentile(0.5):.0f} ms, p99 {1000 * self.percentile(0.99):.0f} ms, "
                f"max {1000 * max(self.latencies, default=float('nan')):.0f} ms; statuses {dict(sorted(self.statuses.items()))}")


def mix(db: str) -> list[str]:
    """The paths asked, in proportion (the live poll most often, as a running sweep's page)."""
    with contextlib.closing(sqlite3.connect(db)) as c:
        exps = [r[0] for r in c.execute("select id from experiment order by id")]
        cands = [r[0] for r in c.execute("select id from candidate order by id limit 40")]
        runs = [r[0] for r in c.execute("select id from run order by id limit 40")]
    e = exps[0]
    live = [f"/experiments/{LOAD_SPEC_NAME}/live.json?after=0", f"/experiments/{e}/live.json?after={cands[0]}"]
    paths = live * 6 + ["/", f"/candidates/{cands[1]}", f"/runs/{runs[1]}", f"/experiments/{e}",
                        f"/compare?c={cands[0]},{cands[1]}"]
    paths += ["/candidates/99999999999999999999", "/experiments/%C2%B2", f"/experiments/{e}?page=%EF%BC%92",
              f"/experiments/{e}/live.json?after=1e9"]  # 400s
    return paths


def hammer(base: str, paths: list[str], requests: int, clients: int) -> Load:
    """`requests` GETs of `paths` (round robin) from `clients` threads."""
    load, lock = Load(), threading.Lock()
    counter = itertools.count()
    netloc = urlsplit(base).netloc

    def client():
        connection = http.client.HTTPConnection(netloc, timeout=60)
        while (n := next(counter)) < requests:
            path = paths[n % len(paths)]
            start = time.perf_counter()
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as error:
                connection.close()
                connection = http.client.HTTPConnection(netloc, timeout=60)
                with lock:
                    load.failures.append(f"{path}: {type(error).__name__}: {error}")
                continue
            took = time.perf_counter() - start
            with lock:
                load.latencies.append(took)
                load.statuses[response.status] += 1
                if response.status >= 500 or b"Traceback" in body:
                    load.failures.append(f"{path}: HTTP {response.status}: {body[:200]!r}")
        connection.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    load.seconds = time.perf_counter() - started
    return load


@contextlib.contextmanager
def sweep_writing(db: str, folder: Path, banks: str = "[4, 8, 16, 20]", timeout: float = 120.0):
    """`dse sweep` of a fresh experiment into `db` as a real process, yielded once it has
    recorded its first candidate (so it writes while the caller loads the UI); waited for at
    the end (its exit code is checked)."""
    spec = folder / f"{LOAD_SPEC_NAME}.toml"
    spec.write_text(SPEC.format(name=LOAD_SPEC_NAME, banks=banks))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "dse", "sweep", str(spec), "--db", db, "--no-progress"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + timeout
        while recorded(db) == 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the sweep recorded nothing (exit {proc.poll()}): {proc.stderr.read()[-2000:]}")
            time.sleep(0.1)
        yield proc
        if proc.wait(timeout=timeout) != 0:
            raise RuntimeError(f"the sweep under load failed ({proc.returncode}): {proc.stderr.read()[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def recorded(db: str) -> int:
    """Candidates of the sweep under load with a run recorded."""
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as c:
        return c.execute("select count(distinct r.candidate_id) from run r join candidate c on c.id = r.candidate_id "
                         "join experiment e on e.id = c.experiment_id where e.name = ?", (LOAD_SPEC_NAME,)).fetchone()[0]


def integrity(db: str) -> str:
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as c:
        return c.execute("pragma integrity_check").fetchone()[0]
