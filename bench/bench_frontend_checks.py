"""The frontend's own check passes on one Llama-3-8B-shaped layer, each repeated on the same
values in one process: quantize's integer check (`dse.frontend.quantize.verify`, numpy), the
copy a stage's trace keeps of its graph (`Graph.copy`) and the graph cache's write of the
pipeline's result. Median and least wall and CPU seconds of `--runs` repetitions (the least is the
steadier figure on a shared machine); run it once with
DSE_BENCH_TREE=<another checkout> and once without, alternating, for a before/after ratio.

    .venv/bin/python bench/bench_frontend_checks.py [--seq 1024] [--recipe llama_prefill] [--runs 3]

The pipeline itself runs once (minutes at seq 2048); not run by tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from timing import runs_of  # (bench/: this script's folder)

TREE = Path(os.environ.get("DSE_BENCH_TREE") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(TREE))
LAYER = dict(dim=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336)


def timed(runs: int, call) -> tuple[float, float, float, float]:
    """Median and least wall, then CPU, seconds of `call()` over `runs` runs."""
    got = runs_of(call, runs)
    return statistics.median(got.walls), min(got.walls), statistics.median(got.cpus), min(got.cpus)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--recipe", default="llama_prefill")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="dse-checks-")
    os.environ["DSE_CACHE_DIR"] = folder
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # as `dse emulate` sets it
    import dse.frontend.quantize as quantize
    import dse.frontend.steps as steps
    import dse.workload.cache as cache
    from dse.frontend.pipeline import run_pipeline

    seen: dict = {}
    original = quantize.verify

    def verify(graph, ctx):
        result = original(graph, ctx)
        seen["verify"] = timed(args.runs, lambda: original(graph, ctx))  # the same trace, taken again
        seen["copy"] = timed(args.runs, graph.copy)
        return result

    steps.BUILTIN["quantize"] = dataclasses.replace(steps.BUILTIN["quantize"], verify=verify)
    stored = cache.store

    def store(key, value):
        path = stored(key, value)
        seen["size"] = path.stat().st_size if path else 0

        def again():
            Path(stored(key + "-again", value)).unlink()

        seen["store"] = timed(args.runs, again)
        return path

    cache.store = store
    params = {"seq": args.seq, **LAYER, **({"layers": 1} if args.recipe == "llama_prefill" else {})}
    try:
        result = run_pipeline(args.recipe, params)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{args.recipe} seq {args.seq} ({TREE}): {'PASS' if result.passed else 'FAIL'}; median of {args.runs}, "
          f"load {os.getloadavg()[0]:.1f}")
    for name, label in (("verify", "quantize integer check"), ("copy", "quantized graph copy"),
                        ("store", f"cache write ({seen.get('size', 0) / 1e9:.2f} GB)")):
        wall, least_wall, cpu, least_cpu = seen.get(name, (float("nan"),) * 4)
        print(f"  {label:<32} wall {wall:6.2f} s (least {least_wall:5.2f})  CPU {cpu:6.2f} s (least {least_cpu:5.2f})")


if __name__ == "__main__":
    main()
