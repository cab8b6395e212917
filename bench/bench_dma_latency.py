"""The analytical model against the emulator across DMA latencies and burst sizes, where a
burst can outlast the gap the bus leaves between another transfer's bursts (a transfer then
holds the bus, `dse.cost.dma.bus_hold_cycles`). Run by hand:

    .venv/bin/python bench/bench_dma_latency.py [--only gemm|recipes]

- gemm: the GEMM recipe (m = 32, 128; n = k = 64) on poly and goban, ``dma.latency_cycles``
  in {default, 50, 200} x ``dma.burst_max_bytes`` in {64, 1024}: SPMD split by columns and
  by rows (poly's 3 prefill cores, goban's 4), "layers" and "pipeline" (2 requests) cut
  after op 1 on every core;
- recipes: resnet_block (16 channels, 8 x 8) and mlp, SPMD on poly's 3 prefill cores,
  goban's 4 and toy's 1, on the same DMA grid.
Prints one line a point (emulated cycles, the model's error) and the worst error; points
beyond 2% are marked ``!!``.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.analytical import estimate, summarize  # noqa: E402
from dse.analytical.placed import estimate_layers  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.mapping import Candidate, Mapping  # noqa: E402
from dse.numerics.run import emulate_graph, prepare_recipe  # noqa: E402

LATENCIES = (None, 50, 200)  # None: the chip's own
BURSTS = (64, 1024)


def chips(name: str):
    for lat, burst in itertools.product(LATENCIES, BURSTS):
        over = {"dma.burst_max_bytes": burst} | ({"dma.latency_cycles": lat} if lat else {})
        yield f"lat={lat or 'default'} burst={burst}", load_chip(name, over)


def spmd_workers(chip) -> int:
    return 3 if chip.name == "poly" else chip.cores.count  # poly's SPMD stays on its prefill group


def error(prep, ref, cand) -> tuple[int, float, bool]:
    rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind,
                        reference=ref)
    if not rep.feasible:
        raise SystemExit(f"{cand.mapping}: infeasible: {rep.reason}")
    if cand.mapping.placement in ("layers", "pipeline"):
        model = estimate_layers(prep.graph, [cand])[0].iloc[0]["latency_cycles"]
    else:
        model = summarize(estimate(prep.graph, [cand]), [cand]).iloc[0]["latency_cycles"]
    return rep.cycles, model / rep.cycles - 1, rep.verdict.passed and rep.verdict.integer_bit_exact


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=("gemm", "recipes"))
    args = ap.parse_args()
    points = []
    if args.only in (None, "gemm"):
        for name, m in itertools.product(("poly", "goban"), (32, 128)):
            prep = prepare_recipe("gemm", dict(m=m, n=64, k=64))
            ref = prep.graph.trace(*prep.inputs)
            for dma, chip in chips(name):
                W, all_cores = spmd_workers(chip), chip.cores.count
                for label, mp in (("spmd cols", Mapping(split="cols", workers=W)),
                                  ("spmd rows", Mapping(split="rows", workers=W)),
                                  ("layers", Mapping(split="cols", workers=all_cores, placement="layers", cuts=(1,))),
                                  ("pipeline", Mapping(split="cols", workers=all_cores, placement="pipeline",
                                                       cuts=(1,), requests=2))):
                    points.append((f"gemm m={m} {name} {dma} {label}", *error(prep, ref, Candidate(chip, mp))))
                    print(points[-1][0], f"emu={points[-1][1]} err={points[-1][2]:+.2%}", flush=True)
    if args.only in (None, "recipes"):
        for recipe, params in (("resnet_block", dict(channels=16, size=8)), ("mlp", {})):
            prep = prepare_recipe(recipe, params)
            ref = prep.graph.trace(*prep.inputs)
            for name in ("poly", "goban", "toy"):
                for dma, chip in chips(name):
                    cand = Candidate(chip, Mapping(workers=spmd_workers(chip)))
                    points.append((f"{recipe} {name} {dma}", *error(prep, ref, cand)))
                    print(points[-1][0], f"emu={points[-1][1]} err={points[-1][2]:+.2%}", flush=True)
    for label, cycles, err, ok in points:
        if abs(err) > 0.02 or not ok:
            print("!!", label, f"err={err:+.2%}", "" if ok else "numerics FAIL")
    worst = max(points, key=lambda p: abs(p[2]))
    print(f"{len(points)} points, worst {worst[2]:+.2%} ({worst[0]}); "
          f"{sum(p[3] for p in points)} of {len(points)} bit-exact")


if __name__ == "__main__":
    main()
