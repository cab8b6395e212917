"""`dse map --chip goban --recipe resnet18 --workers 4` as a whole command against ZigZag's
LOMA mapper on ResNet-18, each a fresh process, in the same run.

    .venv/bin/python bench/bench_map_vs_zigzag.py [--repeat 3] [--zigzag-python PATH | --zigzag-seconds S]
        [--baseline-tree DIR]

ZigZag is not a dependency of dse: install it in a throwaway venv (`python3 -m venv
/tmp/zz && /tmp/zz/bin/pip install zigzag-dse six`: zigzag-dse 3.9.1 imports six without
requiring it) and pass that interpreter. ZigZag runs
its own shipped example: `zigzag/inputs/workload/resnet18.onnx` on its TPU-like hardware
and mapping (`inputs/hardware/tpu_like.yaml`, `inputs/mapping/tpu_like.yaml`), LOMA with
its default lpf_limit 6, optimising latency. Without --zigzag-python the bench quotes the
42 s measured for the issue on this machine (and says so). dse maps with a fresh graph cache
each repeat (cold: capture and frontend included) and once more warm; wall and CPU seconds
(user + sys of the command) are printed. `--zigzag-seconds` quotes a ZigZag time measured
elsewhere (say where in the report). `--baseline-tree` (e.g. `git archive` of main unpacked
in /tmp) runs that tree's cold `dse map` by turns with this one, same interpreter, each with
its own empty cache, and prints both medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from timing import process_seconds  # (bench/: this script's folder)

REPO = Path(__file__).resolve().parents[1]
DSE_MAP = [sys.executable, "-m", "dse", "map", "--chip", "goban", "--recipe", "resnet18", "--workers", "4"]
QUOTED_ZIGZAG_S = 42.0

ZIGZAG = """
import os, sys, tempfile, zigzag
from zigzag.api import get_hardware_performance_zigzag
inputs = os.path.join(os.path.dirname(zigzag.__file__), "inputs")
with tempfile.TemporaryDirectory() as out:
    energy, latency, _ = get_hardware_performance_zigzag(
        os.path.join(inputs, "workload", "resnet18.onnx"), os.path.join(inputs, "hardware", "tpu_like.yaml"),
        os.path.join(inputs, "mapping", "tpu_like.yaml"), opt="latency", dump_folder=out,
        pickle_filename=os.path.join(out, "cmes.pickle"), loma_show_progress_bar=False)
print(f"zigzag: latency {latency:.4g} cycles, energy {energy:.4g}")
"""


def timed(argv: list[str], env: dict, cwd: Path = REPO) -> tuple[float, float]:
    """(wall, CPU) seconds of one command."""
    return process_seconds(argv, env, cwd)


def cold(tree: Path) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(tree), "DSE_CACHE_DIR": os.path.join(tmp, "cache")}
        return timed(DSE_MAP, env, tree)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--zigzag-python", help="an interpreter with zigzag-dse installed")
    ap.add_argument("--zigzag-seconds", type=float, help="ZigZag's time measured elsewhere, quoted (not run)")
    ap.add_argument("--baseline-tree", type=Path, help="another dse tree: its cold dse map by turns with this one")
    args = ap.parse_args()
    colds, warms, zigzag, base = [], [], [], []
    for _ in range(args.repeat):
        if args.baseline_tree:
            base.append(cold(args.baseline_tree))
        with tempfile.TemporaryDirectory(prefix="dse-bench-") as tmp:
            env = {**os.environ, "PYTHONPATH": str(REPO), "DSE_CACHE_DIR": os.path.join(tmp, "cache")}
            colds.append(timed(DSE_MAP, env))
            warms.append(timed(DSE_MAP, env))
        if args.zigzag_python:
            zigzag.append(timed([args.zigzag_python, "-c", ZIGZAG], dict(os.environ))[0])
    c, w = (statistics.median(t for t, _ in colds), statistics.median(t for t, _ in warms))
    c_cpu, w_cpu = (statistics.median(u for _, u in colds), statistics.median(u for _, u in warms))
    if zigzag:
        z, source = statistics.median(zigzag), f"measured here, median of {args.repeat}"
    elif args.zigzag_seconds:
        z, source = args.zigzag_seconds, "QUOTED from --zigzag-seconds (not run here)"
    else:
        z, source = QUOTED_ZIGZAG_S, "QUOTED from the issue (not run: no --zigzag-python)"
    print(f"dse map resnet18 on goban, 4 workers, cold cache: {c:7.2f} s, {c_cpu:6.2f} CPU s (median of {args.repeat})")
    print(f"dse map resnet18 on goban, 4 workers, warm cache: {w:7.2f} s, {w_cpu:6.2f} CPU s")
    if base:
        b, b_cpu = statistics.median(t for t, _ in base), statistics.median(u for _, u in base)
        print(f"baseline {args.baseline_tree}, cold cache (by turns): {b:7.2f} s, {b_cpu:6.2f} CPU s; "
              f"this tree {b / c:.2f}x faster wall, {b_cpu / c_cpu:.2f}x CPU")
    print(f"ZigZag LOMA on ResNet-18 (tpu_like):              {z:7.2f} s ({source})")
    print(f"dse map is {z / c:.1f}x faster cold, {z / w:.1f}x warm (target >= 30x)")


if __name__ == "__main__":
    main()
