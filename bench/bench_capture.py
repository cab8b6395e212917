"""Capture and frontend-check every shipped recipe at its default size (by hand, not CI).

Prints, per recipe: ops and MACs after capture and after the last step, the max abs and
relative error of every stage against PyTorch, and the seconds each stage took.

    .venv/bin/python bench/bench_capture.py [RECIPE ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.frontend import run_pipeline  # noqa: E402
from dse.workload import list_recipes  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", help="recipes to run (default: all shipped)")
    parser.add_argument("--out", help="write the numbered dumps under DIR/<recipe>")
    args = parser.parse_args()
    failed = 0
    print(f"{'recipe':<14} {'ops':>5} {'ops after':>9} {'MACs':>15} {'MACs after':>15} {'seconds':>8}  "
          "max abs error / max rel error per stage")
    for name in args.recipes or list_recipes():
        started = time.perf_counter()
        result = run_pipeline(name, out_dir=Path(args.out) / name if args.out else None)
        seconds = time.perf_counter() - started
        first, last = result.stages[0], result.stages[-1]
        errors = "  ".join(f"{s.name}: {s.max_abs_error:.2e}/{s.max_rel_error:.2e}{'' if s.passed else ' FAIL'}"
                           for s in result.stages)
        print(f"{name:<14} {first.ops:>5} {last.ops:>9} {first.macs:>15,} {last.macs:>15,} {seconds:>8.1f}  {errors}")
        failed += not result.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
