"""The Llama-3-8B-shaped decoder layer (llama_prefill: dim 4096, heads 32, kv_heads 8,
head_dim 128, ffn 14336, one layer) at seq 2048: `dse recipe check` and `dse emulate`, each
a fresh process under /usr/bin/time -v: wall time and peak memory against issue #35's
targets (emulate < 15 s and < 4 GB, check < 20 s), whether each stayed bit-exact, and its
CPU seconds and the load average it started at (on a shared machine, wall time is not the
command's alone).

    .venv/bin/python bench/bench_llama_layer.py [--seq 2048] [--chip goban] [--workers 4]
        [--only check|emulate] [--baseline DIR] [--runs N]

Each command runs with an empty graph cache (DSE_CACHE_DIR in a temporary folder), so the
capture and frontend steps are measured, not served. With `--baseline DIR` (another
checkout, e.g. `git archive <commit> | tar -x -C DIR`, its extensions built), each run of a
command runs in DIR too, the two alternating, and the ratios this tree / baseline are
printed: on a shared machine only a same-run ratio says much. `--runs N`: medians of N runs
each. `--warm`: each command run twice more right after, on the graph cache its cold run
left (the capture and the frontend's checked graphs served): what each further run of the
layer pays, e.g. each candidate chip of a sweep over it (no hit hashes the 2 GB entry its
writer vouched for: `dse.workload.cache`; the first hit, 20 s after the cold run wrote that
entry, shares the machine with the kernel's writeback of it). Takes minutes; not run by the
tests.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER = dict(dim=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, layers=1)
TARGET_S = {"emulate": 15.0, "check": 20.0}
WARM = ("1st hit", "2nd hit")  # --warm's runs on the cache the cold run left
TARGET_GB = {"emulate": 4.0, "check": 8.0}  # check has no memory target of its own: the 8 GB it had


def measured(argv: list[str], env: dict, cwd: Path = REPO) -> tuple[float, float, float, int, str]:
    """Wall seconds, CPU seconds (user + system), peak RSS in GB (10**9 bytes, the targets'
    unit; before 2026-12-06 it was GiB), exit code and stdout of one command. On a shared
    machine the CPU seconds say more than the wall time."""
    p = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True, env=env, cwd=cwd,
                       check=False)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", p.stderr).group(1)
    parts = [float(x) for x in wall.split(":")]
    seconds = sum(x * 60 ** i for i, x in enumerate(reversed(parts)))
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    cpu = sum(float(re.search(rf"{kind} time \(seconds\): (\S+)", p.stderr).group(1)) for kind in ("User", "System"))
    return seconds, cpu, rss_kb * 1024 / 1e9, p.returncode, p.stdout


def run_cold(argv: list[str], tree: Path, warm: bool = False) -> list[tuple]:
    """`measured` of one command in `tree` (its code first on the path) with an empty graph
    cache, and the load average it started at; with `warm`, then the same twice again on the
    cache the first run left: [cold] or [cold, first hit, later hit]."""
    with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(tree), "DSE_CACHE_DIR": os.path.join(tmp, "cache")}
        out = []
        for _ in range(3 if warm else 1):
            load = os.getloadavg()[0]
            out.append((*measured(argv, env, tree), load))
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--chip", default="goban")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--only", choices=["check", "emulate"])
    ap.add_argument("--baseline", type=Path, help="another checkout, run alternately with this one")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--warm", action="store_true", help="each command again on the graph cache its cold run left")
    args = ap.parse_args()
    params = [x for k, v in {"seq": args.seq, **LAYER}.items() for x in ("--param", f"{k}={v}")]
    commands = {
        "check": [sys.executable, "-m", "dse", "recipe", "check", "llama_prefill", *params, "--no-dump"],
        "emulate": [sys.executable, "-m", "dse", "emulate", "--chip", args.chip, "--recipe", "llama_prefill",
                    *params, "--workers", str(args.workers)],
    }
    trees = {"this": REPO, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    print(f"llama_prefill {LAYER} at seq {args.seq}; {args.runs} run(s) each: "
          + ", ".join(f"{k} {v}" for k, v in trees.items()))
    for name, argv in commands.items():
        if args.only and name != args.only:
            continue
        runs: dict[str, list] = {tree: [] for tree in trees}
        if args.warm:
            runs.update({f"{tree} {hit}": [] for tree in trees for hit in WARM})
        for _ in range(args.runs):
            for tree, path in trees.items():
                cold, *warm = run_cold(argv, path, args.warm)
                runs[tree].append(cold)
                for hit, row in zip(WARM, warm):
                    runs[f"{tree} {hit}"].append(row)
        medians = {}
        for tree, rows in runs.items():
            seconds, cpu, gb = (statistics.median(r[i] for r in rows) for i in range(3))
            medians[tree] = (seconds, cpu, gb)
            code, out, load = rows[-1][3], rows[-1][4], rows[-1][5]
            # check: the quantize stage's integer reference; emulate: exit 0 is a passed numerics verdict
            exact = "bit-exact: yes" in out if name == "check" else code == 0
            print(f"dse {name:8s} {tree:16s} {seconds:7.1f} s ({seconds / TARGET_S[name]:.2f}x the "
                  f"{TARGET_S[name]:.0f} s target)  {gb:5.2f} GB ({gb / TARGET_GB[name]:.2f}x the "
                  f"{TARGET_GB[name]:.0f} GB target)  exit {code}  bit-exact {exact}  CPU {cpu:.1f} s  "
                  f"load {load:.2f} at the last start")
            if name == "emulate":  # what a faster run must leave unchanged
                for line in out.splitlines():
                    if line.startswith(("emulated cycles", "DMA bytes", "numerics")):
                        print(f"    {line}")
        for run in ("", *(f" {hit}" for hit in WARM)):
            if f"baseline{run}" in medians:
                (w, c, g), (bw, bc, bg) = medians[f"this{run}"], medians[f"baseline{run}"]
                print(f"dse {name:8s} this / baseline{run}: wall {w / bw:.2f}x, CPU {c / bc:.2f}x, "
                      f"peak memory {g / bg:.2f}x")


if __name__ == "__main__":
    main()
