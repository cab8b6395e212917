"""`dse emulate`'s emulation of one Llama-3-8B-shaped layer (llama_prefill: dim 4096, heads 32,
kv_heads 8, head_dim 128, ffn 14336) alone: `emulate_graph(keep_image=False)` - lowering, the
emulator's run, the checks - in a fresh process, its peak resident memory above what the
process held before it (VmHWM, reset as it starts), wall and CPU seconds, and the DRAM bytes
it gave back (`dse.numerics.boundary`: each op checked at its BARRIER, dead buffers released).
The frontend runs first, served from a graph cache kept for the whole bench (not measured).

    .venv/bin/python bench/bench_emulate_release.py [--seq 1024] [--workers 4] [--runs 3]
        [--baseline DIR] [--computed] [--recipe llama_layers]

`--computed`: the reference computed during the run (`StreamedReference`, none of the
frontend's values taken), as for the model's reused layers (1 to 31), rather than taken from
the frontend's check as for a single layer or layer 0. `--recipe llama_layers`: the model's
layer (`recipes/llama3_8b`'s stage: its MLP over every token, where llama_prefill's runs on the
last one) in place of llama_prefill.

With `--baseline DIR` (another checkout, extensions built) each run also runs there, the two
alternating, and the medians' ratios this tree / baseline are printed (on a shared machine
only a same-run ratio says much). Minutes at seq 1024; not run by the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER = dict(dim=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, layers=1)

CHILD = r"""
import gc, json, sys, time
from pathlib import Path

def status(key):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024

from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.numerics import run

params, workers, computed, recipe = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "computed", sys.argv[4]
prep = run.prepare_recipe(recipe, params, keep_bytes=run.KEPT_REFERENCE_BYTES)
graph, inputs, expected = prep.graph, prep.inputs, prep.expected
tolerance, kind, parts, known = prep.tolerance, prep.reference_kind, prep.parts, prep.pipe.kept
del prep
if computed:
    known = None
gc.collect()
Path("/proc/self/clear_refs").write_text("5")
start = status("VmRSS")
wall, cpu = time.perf_counter(), time.process_time()
rep = run.emulate_graph(graph, Candidate(load_chip("goban"), Mapping(workers=workers)), inputs, expected, tolerance,
                        kind, keep_image=False, known=known, parts=parts)
print(json.dumps({"peak_above": status("VmHWM") - start, "peak": status("VmHWM"), "wall": time.perf_counter() - wall,
                  "cpu": time.process_time() - cpu, "released": getattr(rep, "released_bytes", 0),
                  "passed": bool(rep.verdict.passed), "cycles": int(rep.cycles)}))
"""


def one(tree: Path, params: dict, workers: int, cache: str, computed: bool = False,
        recipe: str = "llama_prefill") -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "DSE_CACHE_DIR": cache}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(params), str(workers),
                        "computed" if computed else "known", recipe], capture_output=True, text=True, env=env, cwd=tree,
                       check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--recipe", default="llama_prefill", choices=["llama_prefill", "llama_layers"])
    ap.add_argument("--computed", action="store_true", help="the reference computed in the run (a reused layer's)")
    args = ap.parse_args()
    params = {**LAYER, "seq": args.seq}
    trees = {"this": REPO, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
        cache = os.path.join(tmp, "cache")
        one(REPO, params, args.workers, cache, recipe=args.recipe)  # the graph cache filled (the frontend, not measured)
        for _ in range(args.runs):
            for name, tree in trees.items():
                r = one(tree, params, args.workers, cache, args.computed, args.recipe)
                runs[name].append(r)
                print(f"  {name:8s} wall {r['wall']:.1f} s, CPU {r['cpu']:.1f} s, peak {r['peak'] / 2**30:.2f} GiB "
                      f"(+{r['peak_above'] / 2**30:.2f}), load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"{args.recipe} layer at seq {args.seq} on goban x{args.workers}, emulate_graph(keep_image=False), "
          f"reference {'computed in the run' if args.computed else 'from the frontend'}, "
          f"{args.runs} run(s) each, medians (load {os.getloadavg()[0]:.1f}):")
    medians = {}
    for name, rs in runs.items():
        m = {k: statistics.median(r[k] for r in rs) for k in ("peak", "peak_above", "wall", "cpu", "released")}
        medians[name] = m
        print(f"  {name:8s} peak {m['peak'] / 2**30:.2f} GiB, +{m['peak_above'] / 2**30:.2f} over the process before it, wall {m['wall']:.1f} s, "
              f"CPU {m['cpu']:.1f} s, given back {m['released'] / 2**30:.2f} GiB; passed "
              f"{all(r['passed'] for r in rs)}, cycles {sorted({r['cycles'] for r in rs})}")
    if "baseline" in medians:
        a, b = medians["this"], medians["baseline"]
        print(f"  this / baseline: peak {a['peak_above'] / b['peak_above']:.2f}x, wall {a['wall'] / b['wall']:.2f}x, "
              f"CPU {a['cpu'] / b['cpu']:.2f}x")


if __name__ == "__main__":
    main()
