"""Every recipe lowered and emulated on a chip with 1 and N workers under the `framework`
and `search` policies: emulated cycles, peak private SRAM per worker, the framework /
search cycle ratio, how many quantize / requantize / dequantize ops the lowering put on
the Fp2Int / Int2Fp Balls (of all of them, under `search`) and the numerics verdict. Run by hand:

    .venv/bin/python bench/bench_lower.py [--chip goban] [--workers 1,4] [--split cols] [--recipes a,b]
        [--elementwise auto|ball|core]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dse.analytical.calibration import CALIBRATION_SET  # noqa: E402
from dse.chips import load_chip  # noqa: E402
from dse.frontend import run_pipeline  # noqa: E402
from dse.mapping import Candidate, Mapping  # noqa: E402
from dse.numerics import emulate_graph  # noqa: E402
from dse.workload.recipes import instantiate, load_recipe  # noqa: E402

# Every recipe at the sizes of the model's calibration set (small enough for seconds).
SMALL = CALIBRATION_SET


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chip", default="goban")
    ap.add_argument("--workers", default="1,4")
    ap.add_argument("--split", default="cols", choices=("rows", "cols"))
    ap.add_argument("--recipes", default=",".join(SMALL))
    ap.add_argument("--elementwise", default="auto", choices=("auto", "ball", "core"),
                    help="where quantize / requantize / dequantize run (dse.lower.lower)")
    args = ap.parse_args()
    chip = load_chip(args.chip)
    print(f"chip {chip.name}, split {args.split}, elementwise {args.elementwise}; "
          f"private SRAM {chip.private_sram_bytes:,} B per core")
    print("| recipe | params | workers | framework cycles | search cycles | fw/search | peak SRAM B (search) "
          "| scale ops on Balls | verdict | int bit-exact | max abs err | max rel err (tol) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for recipe in args.recipes.split(","):
        params = SMALL[recipe]
        pipe = run_pipeline(recipe, params)
        _, inputs = instantiate(load_recipe(recipe), **params)
        tol = max(s.tolerance for s in pipe.stages)
        fg = next(g for s, g in reversed(list(zip(pipe.stages, pipe.graphs))) if not s.quantized)
        ref = fg.trace(*inputs)
        expected = [ref[n] for n in fg.outputs]
        for w in map(int, args.workers.split(",")):
            reps = {}
            t = time.perf_counter()
            for policy in ("framework", "search"):
                reps[policy] = emulate_graph(pipe.graph, Candidate(chip, Mapping(policy=policy, workers=w,
                                                                                   split=args.split)),
                                             inputs, expected, tol, elementwise=args.elementwise)
            fw, se = reps["framework"], reps["search"]
            if not (fw.feasible and se.feasible):
                print(f"| {recipe} | {params} | {w} | {fw.reason or fw.cycles} | {se.reason or se.cycles} "
                      f"| | | | | | | |")
                continue
            v = se.verdict
            scale_ops = [o["how"] for o in se.ops if o["kind"] in ("quantize", "requantize", "dequantize")]
            on_balls = sum(h in ("fp2int", "int2fp") for h in scale_ops)
            print(f"| {recipe} | {params} | {w} | {fw.cycles:,} | {se.cycles:,} | {fw.cycles / se.cycles:.3f} "
                  f"| {se.peak_sram_bytes:,} | {on_balls}/{len(scale_ops)} "
                  f"| {'PASS' if v.passed and fw.verdict.passed else 'FAIL'} "
                  f"| {v.integer_bit_exact and fw.verdict.integer_bit_exact} | {v.max_abs_error:.3g} "
                  f"| {v.max_rel_error:.3g} ({tol:g}) |", flush=True)
            print(f"<!-- {recipe} w={w}: {time.perf_counter() - t:.1f} s host -->", file=sys.stderr)


if __name__ == "__main__" and "--spans" not in sys.argv:
    main()


def spans_vs_tiles(lengths=(64, 256), workers=4, chip_name="goban") -> None:
    """temporal_conv: per-op tile split (a barrier per op) against fused temporal spans."""
    from dse.numerics.run import emulate_spans
    chip = load_chip(chip_name)
    print("\n| temporal_conv length | workers | tiles cycles | spans cycles | tiles/spans | spans bit-exact |")
    print("|---|---|---|---|---|---|")
    for length in lengths:
        params = dict(length=length, mels=16, channels=32, out_channels=16)
        pipe = run_pipeline("temporal_conv", params)
        _, inputs = instantiate(load_recipe("temporal_conv"), **params)
        cand = Candidate(chip, Mapping(workers=workers))
        t = emulate_graph(pipe.graph, cand, inputs)
        s = emulate_spans(pipe.graph, cand, inputs)
        print(f"| {length} | {workers} | {t.cycles:,} | {s.cycles:,} | {t.cycles / s.cycles:.3f} "
              f"| {s.verdict.outputs_bit_exact and s.verdict.integer_bit_exact} |", flush=True)


if __name__ == "__main__" and "--spans" in sys.argv:
    spans_vs_tiles()
