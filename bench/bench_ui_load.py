"""`dse ui` under load while a sweep writes to the same SQLite store (issue 36).

    .venv/bin/python bench/bench_ui_load.py                      # 2,000 requests, 16 clients
    .venv/bin/python bench/bench_ui_load.py --requests 5000 --clients 32

A real small sweep makes the store (one experiment, 12 candidates); a real `dse ui` process
serves it; a second real sweep (24 candidates) writes to it while client threads send the
requests of `tests/uiload.py` (live polls, pages, comparisons, hostile URLs). Prints the
statuses, p50/p99/max latency and the store's `pragma integrity_check`; exits 1 on any 5xx,
dropped connection, Python text in a body, or a damaged store.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from uiload import hammer, integrity, mix, recorded, sweep_writing  # noqa: E402
from uiserver import dse_ui_process, make_store  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        started = time.perf_counter()
        db = make_store(folder, experiments=(("banks-workers", "[8, 20]"),))
        print(f"store made in {time.perf_counter() - started:.1f} s: {db}")
        with dse_ui_process(db) as (base, _proc), sweep_writing(db, folder) as sweep:
            before = recorded(db)
            load = hammer(base, mix(db), args.requests, args.clients)
            during = recorded(db) - before
            running = sweep.poll() is None
        print(f"load: {args.clients} clients, {load.summary()}")
        print(f"the sweep recorded {during} candidates during the load (still running after it: {running}); "
              f"{recorded(db)} in all")
        check = integrity(db)
        print(f"pragma integrity_check: {check}")
        for failure in load.failures[:20]:
            print(f"  FAILED {failure}")
        return 0 if not load.failures and check == "ok" and len(load.latencies) == args.requests else 1


if __name__ == "__main__":
    sys.exit(main())
