"""Chip knobs that change the plan's figures against knobs that do not, side by side.

    .venv/bin/python bench/bench_chip_knobs.py [--repeat 3]

Two analytical-only grid sweeps of the same size (640 candidates) on the quickstart's
workload (mlp on goban, whose quantize / requantize / dequantize ops are planned as Fp2Int
/ Int2Fp streams or core ops per candidate), each into a fresh SQLite store, store writes
included:
  - chip knobs: dma.burst_max_bytes x dma.latency_cycles x banks.rows x banks.count;
  - bank count x workers alone.
Prints the median seconds of several runs, candidates per second, and the ratio of their
times per candidate (the machine is shared and noisy: read the ratio).
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

from dse.records import Store  # noqa: E402
from dse.runner import Sweep, load_spec  # noqa: E402
from dse.runner.execution import make_executor  # noqa: E402
from dse.runner.stages import analytical_graph  # noqa: E402

HEAD = """
[experiment]
name = "{name}"
hypothesis = "throughput"

[workload]
recipe = "mlp"

[baseline]
chip = "goban"

[[objectives]]
metric = "latency_cycles"

[[objectives]]
metric = "private_sram_bytes"

[search]
sampler = "grid"
max_grid = 100000
"""

CHIP_KNOBS = """
[[space]]
name = "burst"
target = "chip.dma.burst_max_bytes"
values = [64, 128, 256, 512, 1024]

[[space]]
name = "latency"
target = "chip.dma.latency_cycles"
values = [50, 100, 150, 200]

[[space]]
name = "rows"
target = "chip.banks.rows"
values = [128, 256, 512, 1024]

[[space]]
name = "banks"
target = "chip.banks.count"
values = [8, 12, 16, 20, 24, 28, 32, 36]
"""

COUNT_AND_WORKERS = """
[[space]]
name = "banks"
target = "chip.banks.count"
low = 5
high = 84

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 2, 3, 4, 5, 6, 7, 8]

[[space]]
name = "cores"
target = "chip.cores.count"
values = [8]
"""


def sweep_seconds(name: str, space: str, repeat: int) -> tuple[float, int]:
    graph = analytical_graph("mlp", {})  # captured once: its cost does not grow with candidates
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{name}.toml"
        path.write_text(HEAD.format(name=name) + space)
        spec = load_spec(path)
        times, evaluated = [], 0
        for r in range(repeat):
            executor = make_executor(graph, 1)
            try:
                with Store(Path(tmp) / f"{name}{r}.db") as store:
                    t = time.perf_counter()
                    result = Sweep(spec, graph, store, executor, progress=False).run()
                    times.append(time.perf_counter() - t)
                    evaluated = result.evaluated
            finally:
                executor.close()
    return statistics.median(times), evaluated


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = {}
    for name, space in (("count_workers", COUNT_AND_WORKERS), ("chip_knobs", CHIP_KNOBS)):
        seconds, n = sweep_seconds(name, space, args.repeat)
        rows[name] = seconds / n
        print(f"{name:<14} {n} candidates: median {seconds:.2f} s over {args.repeat} runs, "
              f"{n / seconds:,.0f} candidates/s, {1000 * seconds / n:.3f} ms a candidate")
    print(f"chip knobs / bank count x workers, time per candidate: {rows['chip_knobs'] / rows['count_workers']:.2f}x")


if __name__ == "__main__":
    main()
