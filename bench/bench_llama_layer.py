"""The Llama-3-8B-shaped decoder layer (llama_prefill: dim 4096, heads 32, kv_heads 8,
head_dim 128, ffn 14336, one layer) at seq 2048: `dse recipe check` and `dse emulate`, each
a fresh process under /usr/bin/time -v: wall time and peak memory against the targets
(2 minutes, 8 GB each), whether each stayed bit-exact, and its CPU seconds and the load
average it started at (on a shared machine, wall time is not the command's alone).

    .venv/bin/python bench/bench_llama_layer.py [--seq 2048] [--chip goban] [--workers 4]
        [--only check|emulate]

Each command runs once with an empty graph cache (DSE_CACHE_DIR in a temporary folder), so
the capture and frontend steps are measured, not served. Takes minutes; not run by the tests.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYER = dict(dim=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, layers=1)
TARGET_S, TARGET_GB = 120.0, 8.0


def measured(argv: list[str], env: dict) -> tuple[float, float, float, int, str]:
    """Wall seconds, CPU seconds (user + system), peak RSS in GB, exit code and stdout of
    one command. On a shared machine the CPU seconds say more than the wall time."""
    p = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True, env=env, cwd=REPO,
                       check=False)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", p.stderr).group(1)
    parts = [float(x) for x in wall.split(":")]
    seconds = sum(x * 60 ** i for i, x in enumerate(reversed(parts)))
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    cpu = sum(float(re.search(rf"{kind} time \(seconds\): (\S+)", p.stderr).group(1)) for kind in ("User", "System"))
    return seconds, cpu, rss_kb / 1024**2, p.returncode, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--chip", default="goban")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--only", choices=["check", "emulate"])
    args = ap.parse_args()
    params = [x for k, v in {"seq": args.seq, **LAYER}.items() for x in ("--param", f"{k}={v}")]
    commands = {
        "check": [sys.executable, "-m", "dse", "recipe", "check", "llama_prefill", *params, "--no-dump"],
        "emulate": [sys.executable, "-m", "dse", "emulate", "--chip", args.chip, "--recipe", "llama_prefill",
                    *params, "--workers", str(args.workers)],
    }
    print(f"llama_prefill {LAYER} at seq {args.seq}")
    for name, argv in commands.items():
        if args.only and name != args.only:
            continue
        with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
            env = {**os.environ, "PYTHONPATH": str(REPO), "DSE_CACHE_DIR": os.path.join(tmp, "cache")}
            load = os.getloadavg()[0]
            seconds, cpu, gb, code, out = measured(argv, env)
        # check: the quantize stage's integer reference; emulate: exit 0 is a passed numerics verdict
        exact = "bit-exact: yes" in out if name == "check" else code == 0
        print(f"dse {name:8s} {seconds:8.1f} s ({seconds / TARGET_S:.2f}x the 2 min target)  "
              f"{gb:6.2f} GB ({gb / TARGET_GB:.2f}x the 8 GB target)  exit {code}  bit-exact {exact}  "
              f"CPU {cpu:.1f} s  load {load:.2f} at start")
        if name == "emulate":  # what a faster run must leave unchanged
            for line in out.splitlines():
                if line.startswith(("emulated cycles", "DMA bytes", "numerics")):
                    print(f"    {line}")


if __name__ == "__main__":
    main()
