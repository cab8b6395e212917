"""The analytical model against the emulator, every timing mode. Run by hand:

    .venv/bin/python bench/bench_model.py [--chips toy,goban]

- overlapped: every recipe of the calibration set x chip x 1 and 4 workers (where the
  cores exist) x both policies, uncalibrated model vs the emulator's overlapped cycles
  (what `dse calibrate` fits; this prints the error before any fit);
- serial: the same points, `estimate(timing="serial")` vs the emulator's serial mode;
- spans: temporal_conv (64 and 256 rows) on goban with 1, 2 and 4 workers in temporal
  spans, model vs emulator.
Prints the mean absolute and the largest error of each, and the worst point.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import emulator  # noqa: E402
from dse.analytical import estimate, summarize  # noqa: E402
from dse.analytical.calibration import CALIBRATION_SET  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.frontend import run_pipeline  # noqa: E402
from dse.lower import lower  # noqa: E402
from dse.mapping import Candidate, Mapping  # noqa: E402
from dse.numerics import emulate_graph  # noqa: E402
from dse.workload.recipes import instantiate, load_recipe  # noqa: E402


def report(name: str, rows: list[tuple[str, float, float]]) -> None:
    errors = [(abs(model / measured - 1) * 100, label) for label, model, measured in rows]
    worst = max(errors)
    print(f"{name:<10} {len(rows):>3} points: mean |error| {sum(e for e, _ in errors) / len(errors):.3f}%, "
          f"max {worst[0]:.2f}% ({worst[1]})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chips", default="toy,pebble,goban")
    args = ap.parse_args()
    modes: dict[str, list] = {"overlapped": [], "serial": []}
    for recipe, params in CALIBRATION_SET.items():
        graph = run_pipeline(recipe, params, check=False).graph
        _, inputs = instantiate(load_recipe(recipe), **params)
        for chip in map(load_chip, args.chips.split(",")):
            for w in (1, 4):
                if w > chip.cores.count:
                    continue
                for policy in ("framework", "search"):
                    cand = Candidate(chip, Mapping(policy=policy, workers=w))
                    low = lower(graph, cand, inputs)
                    label = f"{recipe} {chip.name} w{w} {policy}"
                    for mode, rows in modes.items():
                        model = summarize(estimate(graph, [cand], timing=mode), [cand]).latency_cycles[0]
                        measured = emulator.run(low.program, chip, low.image, mode=mode, functional=False).cycles
                        rows.append((label, model, measured))
    for mode, rows in modes.items():
        report(mode, rows)
    spans = []
    goban = load_chip("goban")
    for length in (64, 256):
        params = dict(CALIBRATION_SET["temporal_conv"], length=length)
        graph = run_pipeline("temporal_conv", params, check=False).graph
        _, inputs = instantiate(load_recipe("temporal_conv"), **params)
        for w in (1, 2, 4):
            cand = Candidate(goban, Mapping(workers=w, partition="spans"))
            model = summarize(estimate(graph, [cand]), [cand]).latency_cycles[0]
            spans.append((f"temporal_conv L={length} w{w}", model, emulate_graph(graph, cand, inputs).cycles))
    report("spans", spans)


if __name__ == "__main__":
    main()
