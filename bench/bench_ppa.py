"""What area, energy and power cost a sweep: the same analytical grid with and without them.

    .venv/bin/python bench/bench_ppa.py [--repeat 5]

Sweeps one grid (bench_sweep.py's: mlp on goban, bank count 4..32 x bank rows x workers
x dataflow x double buffering, 2,320 candidates) into a fresh SQLite store twice per round, ``[stages] ppa =
true`` and ``false`` by turns, and prints the medians: candidates per second with and
without, and their ratio (per candidate, with / without). Then the analytical stage alone
(one batch of every candidate, no store): the model with and without `add_ppa`. CACTI's
answers are on disk after the first round (`dse.ppa.cacti`), as in any sweep after the
first. The machine is shared and noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import os
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
from dse.runner.stages import Workload, analytical_batch, analytical_graph  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from bench_sweep import SPEC as SWEEP_SPEC  # noqa: E402


def spec_text(ppa: bool) -> str:
    """bench_sweep's grid with area, energy and power on or off."""
    return SWEEP_SPEC.format(sampler="grid", trials=1) + f"\n[stages]\nppa = {str(ppa).lower()}\n"


def sweep_rate(graph, folder: Path, ppa: bool, tag: str) -> tuple[float, int]:
    path = folder / f"{tag}.toml"
    path.write_text(spec_text(ppa))
    spec = load_spec(path)
    work = Workload(graph)
    if not ppa:
        work.ppa_calibration = None
    executor = make_executor(work, 1)
    try:
        with Store(folder / f"{tag}.db") as store:
            started = time.perf_counter()
            result = Sweep(spec, graph, store, executor, progress=False).run()
            return time.perf_counter() - started, result.evaluated
    finally:
        executor.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    graph = analytical_graph("mlp", {})
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sweep_rate(graph, folder, True, "warm")  # CACTI's answers on disk, the graph's plans made
        on, off, n = [], [], 0
        for k in range(args.repeat):
            for ppa, out in ((True, on), (False, off)) if k % 2 == 0 else ((False, off), (True, on)):
                seconds, n = sweep_rate(graph, folder, ppa, f"r{k}{ppa}")
                out.append(seconds)
        s_on, s_off = statistics.median(on), statistics.median(off)
        print(f"sweep of {n} candidates into SQLite, median of {args.repeat}:")
        print(f"  with area/energy    {s_on:6.2f} s  {n / s_on:8.0f} candidates/s")
        print(f"  without             {s_off:6.2f} s  {n / s_off:8.0f} candidates/s")
        print(f"  per candidate, with / without: {s_on / s_off:.2f}x")

        spec_path = folder / "stage.toml"
        spec_path.write_text(spec_text(True))
        spec = load_spec(spec_path)
        from dse.runner.candidates import CandidateBuilder
        from dse.mapping import Candidate, mapping_from_dict
        from emulator.chip import chip_from_dict

        builder = CandidateBuilder(spec)
        cands, chips = [], {}
        for params in spec.space.grid():
            b = builder.build(params)
            if not b.reason:  # candidates of one config share its chip object, as in a sweep
                if b.config_json not in chips:
                    chips[b.config_json] = chip_from_dict(b.config)
                chip = chips[b.config_json]
                cands.append(Candidate(chip, mapping_from_dict(b.mapping)))
        analytical_batch(graph, cands, None, {})  # component tables made
        stage_on, stage_off, rows_on, rows_off = [], [], [], []
        for k in range(args.repeat):
            for ppa, out, made in ((True, stage_on, rows_on), (False, stage_off, rows_off)):
                started = time.perf_counter()
                results = analytical_batch(graph, cands, None, {} if ppa else None)
                rows = [r.metrics() for r in results]  # the metric rows the store then writes
                out.append(time.perf_counter() - started)
                made.append(sum(map(len, rows)))
        a_on, a_off = statistics.median(stage_on), statistics.median(stage_off)
        print(f"analytical stage alone (and its metric rows: {rows_on[0] / len(cands):.0f} a candidate with, "
              f"{rows_off[0] / len(cands):.0f} without), {len(cands)} candidates in one batch, median of {args.repeat}:")
        print(f"  with area/energy    {a_on * 1e3:7.1f} ms  {len(cands) / a_on:8.0f} candidates/s")
        print(f"  without             {a_off * 1e3:7.1f} ms  {len(cands) / a_off:8.0f} candidates/s")
        print(f"  per candidate, with / without: {a_on / a_off:.2f}x")


if __name__ == "__main__":
    main()
