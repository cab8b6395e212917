"""What ``mapping.placement = "auto"`` costs per candidate: `resolve_auto` (the options
costed in full only while they can still win, `latency_bounds`) against costing every
option in full (`auto_latencies`, what it did before), interleaved in one run, the picks
asserted equal first, and how many options the pruned pick costed in full (the fewer, the
tighter the bounds).

    .venv/bin/python bench/bench_auto.py [--repeat 5]

Cases: the auto candidate of experiments/pipeline.toml (tiny llama prefill, 4 requests, on
poly), the same with one request and with fusion, on goban's 4 cores, and the GEMM.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from dse.analytical import placed  # noqa: E402
from dse.analytical.placed import auto_latencies, auto_options, resolve_auto  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.mapping import Candidate  # noqa: E402
from dse.mapping.candidate import mapping_from_dict  # noqa: E402
from dse.runner.spec import load_spec  # noqa: E402
from dse.runner.stages import analytical_graph  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def every_option(graph, cand):
    options = auto_options(graph, cand)
    exact = auto_latencies(graph, cand)
    return options[int(np.argmin(exact))] if np.isfinite(exact).any() else options[0]


def pruned(graph, cand):
    placed._AUTO.clear()  # the per-process cache would answer every repeat after the first
    return resolve_auto(graph, cand)


def costed_in_full(graph, cand) -> int:
    """How many options `resolve_auto` costs in full (`estimate_layers`, one option a call)."""
    real, seen = placed._latencies, []
    placed._latencies = lambda g, cands: seen.extend(cands) or real(g, cands)
    try:
        pruned(graph, cand)
    finally:
        placed._latencies = real
    return len(seen)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    m = load_spec(ROOT / "experiments" / "pipeline.toml").model
    llama = analytical_graph(m.workload.recipe, m.workload.params)
    gemm = analytical_graph("gemm", dict(m=32, n=64, k=64))
    poly, goban = load_chip("poly"), load_chip("goban")
    base = {**m.baseline.mapping, "placement": "auto"}
    cases = [("pipeline.toml auto (llama, 4 requests, poly)", llama, poly, base),
             ("llama, 1 request, poly", llama, poly, {**base, "requests": 1}),
             ("llama, 4 requests, fused, poly", llama, poly, {**base, "fusion": "fuse"}),
             ("llama, 4 requests, goban 4 cores", llama, goban, {**base, "workers": 4}),
             ("gemm 32x64x64, 2 requests, poly", gemm, poly, {**base, "requests": 2})]
    print(f"{'case':<46} {'options':>7} {'costed':>6} {'every option s':>15} {'pruned s':>9} {'ratio':>7}  pick")
    for name, graph, chip, mapping in cases:
        cand = Candidate(chip, mapping_from_dict(mapping))
        old, new = every_option(graph, cand), pruned(graph, cand)  # warms plan caches for both
        assert old == new, (name, old, new)
        t_old, t_new = [], []
        for _ in range(args.repeat):
            for fn, times in ((every_option, t_old), (pruned, t_new)):
                started = time.perf_counter()
                fn(graph, cand)
                times.append(time.perf_counter() - started)
        a, b = statistics.median(t_old), statistics.median(t_new)
        pick = f"{new.placement or 'spmd'}" + (f" cuts={list(new.cuts)}" if new.cuts else "")
        print(f"{name:<46} {len(auto_options(graph, cand)):>7} {costed_in_full(graph, cand):>6} {a:>15.3f} "
              f"{b:>9.3f} {b / a:>6.2f}x  {pick}")


if __name__ == "__main__":
    main()
