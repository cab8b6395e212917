"""The emulator's run of a Llama-3-8B-shaped layer with OpenMP (torch's pool, which the
graph's core ops run on) limited to one thread during the run (`Machine.run`, now) against
OpenMP left as it is (BLAS alone limited, before): wall and CPU seconds (CPU counts every
thread: idle pool threads spinning show there), median of --repeat runs each, alternating
in one process, and the bits checked equal (cycles, DRAM image).

    .venv/bin/python bench/bench_emulator_threads.py [--seq 512] [--repeat 3]

Lowers the layer once through `dse.numerics.run.emulate_recipe` (its own run is the first
"now" sample's warm-up, not timed), then runs the emulator on copies of the lowered image.
Takes a minute at seq 512; not run by tests.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from layer_program import lowered_layer  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    import emulator.machine as machine
    from emulator.thread_limits import limited

    caught = lowered_layer(args.seq, "dse-threads-")
    inner = caught["run"]
    ways = {"now (OpenMP 1 thread)": lambda n: limited(n),
            "before (BLAS alone)": lambda n: limited(n, user_api="blas")}
    walls, cpus, digests = {w: [] for w in ways}, {w: [] for w in ways}, {}
    for _ in range(args.repeat):
        for way, limits in ways.items():
            machine.limited = limits
            t, c = time.perf_counter(), time.process_time()
            res = inner(caught["program"], caught["chip"], caught["image"], **caught["kw"])
            walls[way].append(time.perf_counter() - t)
            cpus[way].append(time.process_time() - c)
            digests[way] = (res.cycles, hashlib.sha1(res.dram).hexdigest())
            del res
    machine.limited = limited
    assert len(set(digests.values())) == 1, digests
    print(f"llama layer seq {args.seq}, load {os.getloadavg()[0]:.1f}")
    print(f"{'way':<24} {'wall s':>7} {'CPU s':>7}")
    for way in ways:
        print(f"{way:<24} {statistics.median(walls[way]):7.2f} {statistics.median(cpus[way]):7.2f}")
    now, before = ways
    print(f"ratio now/before: wall {statistics.median(walls[now]) / statistics.median(walls[before]):.2f}, "
          f"CPU {statistics.median(cpus[now]) / statistics.median(cpus[before]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
