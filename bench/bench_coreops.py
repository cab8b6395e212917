"""Core ops' host time: the elementwise kinds block by block (`emulator.coreops.BLOCKWISE`)
against the whole array at once (the path before), on a Llama layer's shapes at seq 2048: a
dequantize (int32 accumulator in tile order x fp32 -> fp32, 4M elements) and a requantize
(fp32 -> int8 by a scale, 4M elements). Both ways in one run, alternating; median of
--repeat runs each, and the ratio; the bits are checked equal.

    .venv/bin/python bench/bench_coreops.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import emulator.coreops as co  # noqa: E402
from emulator.isa import DramTensor  # noqa: E402

SHAPE = (1, 1, 128, 32, 1024)  # [.., M tiles, N tiles, ..]: 4M elements


def tensors():
    """The image and the two ops' operands (the dequantize reads the accumulator in tile order)."""
    n = int(np.prod(SHAPE))
    img = np.zeros(4 * n * 4, np.uint8)
    rng = np.random.default_rng(0)
    acc = DramTensor(0, SHAPE, "int32", (n * 4, n * 4, 4096, 128 * 4096, 4))  # N tiles outer
    scale = DramTensor(n * 4, SHAPE, "fp32")
    out = DramTensor(2 * n * 4, SHAPE, "fp32")
    q = DramTensor(3 * n * 4, SHAPE, "int8")
    co.dram_view(img, acc)[...] = rng.integers(-2**20, 2**20, SHAPE, dtype=np.int32)
    co.dram_view(img, scale)[...] = rng.random(SHAPE, dtype=np.float32) * 1e-3
    return img, [("dequantize (mul)", "mul", out, [acc, scale], {}),
                 ("requantize (scale)", "scale", q, [out], {"scale": 40.2})]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    img, ops = tensors()
    blockwise = dict(co.BLOCKWISE)
    print(f"{'op':<22} {'whole s':>8} {'blocks s':>9} {'ratio':>6}")
    for name, kind, dst, srcs, params in ops:
        times = {"whole": [], "blocks": []}
        images = {}
        for _ in range(args.repeat):
            for way in ("whole", "blocks"):
                co.BLOCKWISE.clear()
                if way == "blocks":
                    co.BLOCKWISE.update(blockwise)
                t = time.perf_counter()
                co.execute(img, kind, dst, srcs, params)
                times[way].append(time.perf_counter() - t)
                images[way] = co.dram_view(img, dst).copy()
        co.BLOCKWISE.update(blockwise)
        assert np.array_equal(images["whole"].view(np.uint8), images["blocks"].view(np.uint8)), name
        w, b = statistics.median(times["whole"]), statistics.median(times["blocks"])
        print(f"{name:<22} {w:8.3f} {b:9.3f} {b / w:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
