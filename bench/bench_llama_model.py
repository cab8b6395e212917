"""The whole Llama-3-8B-shaped model (`recipes/llama3_8b`: decoder layers of dim 4096, GQA
32/8, head_dim 128, ffn 14336) streamed layer by layer: `dse emulate --recipe` of the chain
cut to N layers, and `dse recipe chain` (the frontend's check, no emulation), each a fresh
process under /usr/bin/time -v, for N = 1 and 2 (--layers): wall time, CPU time and peak
memory, the per-layer figure (N=2 minus N=1) and the extrapolation to 32 layers against the
targets (10 minutes, 8 GB). A peak that does not grow with N is the streaming at work.

    .venv/bin/python bench/bench_llama_model.py [--seq 2048] [--layers 1,2] [--chip goban]
        [--workers 4] [--only check|emulate] [--check-every-layer | --compare-full] [--baseline DIR]

Layer 0's frontend is checked in full and later layers reuse its checked structure (the
chain's notes say so); `--check-every-layer` checks every layer in full, `--compare-full`
runs both, one after the other, and prints the per-layer ratio reused / full. `--baseline DIR`
(another checkout, its extensions built): each measurement run there too, after this tree's,
and the per-layer ratio this tree / baseline.

Takes tens of minutes at seq 2048; not run by the tests.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_llama_layer import REPO, measured  # noqa: E402

CHAIN = REPO / "recipes" / "llama3_8b" / "chain.toml"
LAYERS, TARGET_S, TARGET_GB = 32, 600.0, 8.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--layers", default="1,2", help="the layer counts to run, e.g. 1,2")
    ap.add_argument("--chip", default="goban")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--only", choices=["check", "emulate"])
    ap.add_argument("--check-every-layer", action="store_true", help="every layer's frontend checked in full")
    ap.add_argument("--compare-full", action="store_true", help="run with and without --check-every-layer")
    ap.add_argument("--baseline", type=Path, help="another checkout, measured after this one the same way")
    args = ap.parse_args()
    modes = [False, True] if args.compare_full else [args.check_every_layer]
    trees = [REPO, *([args.baseline.resolve()] if args.baseline else [])]
    for name in ("check", "emulate"):
        if args.only and name != args.only:
            continue
        per_layer = {(every, tree): measure(args, name, every, tree) for every in modes for tree in trees}
        if args.compare_full and all(per_layer[every, REPO] for every in modes):
            (rw, rc), (fw, fc) = per_layer[False, REPO], per_layer[True, REPO]
            print(f"  per layer, reused / every layer in full: wall {rw / fw:.2f}x, CPU {rc / fc:.2f}x")
        for every in modes if args.baseline else []:
            this, base = per_layer[every, REPO], per_layer[every, trees[1]]
            if this and base:
                print(f"  per layer{', every layer in full' if every else ''}, this tree / baseline: "
                      f"wall {this[0] / base[0]:.2f}x, CPU {this[1] / base[1]:.2f}x")


def measure(args, name: str, every: bool, tree: Path = REPO) -> tuple[float, float] | None:
    """`dse <name>` of the chain cut to each --layers count, run in `tree`; the per-layer (wall,
    CPU) seconds."""
    counts = [int(n) for n in args.layers.split(",")]
    print(f"llama3_8b chain at seq {args.seq}, layers {counts}, {args.chip} x{args.workers} workers"
          + (", every layer checked in full" if every else ", later layers reusing layer 0's checked structure")
          + ("" if tree == REPO else f"; baseline {tree}"))
    rows = {}
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
            chain = Path(tmp) / "chain.toml"
            text = re.sub(r"repeat = \d+", f"repeat = {n}", CHAIN.read_text())
            chain.write_text(text.replace("seq = 2048", f"seq = {args.seq}"))
            argv = ([sys.executable, "-m", "dse", "recipe", "chain", str(chain)] if name == "check" else
                    [sys.executable, "-m", "dse", "emulate", "--chip", args.chip, "--recipe", str(chain),
                     "--workers", str(args.workers)]) + (["--check-every-layer"] if every else [])
            env = {**os.environ, "PYTHONPATH": str(tree), "DSE_CACHE_DIR": os.path.join(tmp, "cache")}
            load = os.getloadavg()[0]
            seconds, cpu, gb, code, out = measured(argv, env, tree)
        if code == 0:  # a failed run's figures say nothing of the model
            rows[n] = (seconds, cpu, gb)
        print(f"dse {name:8s} {n:2d} layer(s) {seconds:8.1f} s  CPU {cpu:8.1f} s  {gb:6.2f} GB  exit {code}  "
              f"load {load:.2f} at start")
        for line in out.splitlines():
            if any(w in line for w in ("total:", "vs the float chain", "passed", "FAILED", "note:")):
                print(f"    {line.strip()}")
    if len(rows) >= 2:
        a, b = min(rows), max(rows)
        per_wall = (rows[b][0] - rows[a][0]) / (b - a)
        per_cpu = (rows[b][1] - rows[a][1]) / (b - a)
        whole = rows[a][0] + (LAYERS - a) * per_wall
        whole_cpu = rows[a][1] + (LAYERS - a) * per_cpu
        peak = max(r[2] for r in rows.values())
        print(f"  per layer: {per_wall:.1f} s wall, {per_cpu:.1f} s CPU; peak {rows[a][2]:.2f} GB at {a}, "
              f"{rows[b][2]:.2f} GB at {b} layers")
        print(f"  {LAYERS} layers, extrapolated: {whole:.0f} s ({whole / TARGET_S:.2f}x the 10 min target; "
              f"CPU {whole_cpu:.0f} s), "
              f"peak {peak:.2f} GB ({peak / TARGET_GB:.2f}x the 8 GB target, if it stays flat)")
        return per_wall, per_cpu
    return None


if __name__ == "__main__":
    main()
