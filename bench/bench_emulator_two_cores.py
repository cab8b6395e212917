"""The emulator's run of a Llama-3-8B-shaped layer on one core against two: the DRAM image's
written chunks populated on a helper thread (`emulator.prefault`), the chains' large
products split across two threads (`_functional_core.split_threshold`) and the large
elementwise core ops and stores worked on two (`emulator.coreops.SHARED_ELEMENTS`), each on
and off (after one untimed run): wall and CPU seconds (CPU counts every thread) and the
run's own thread's CPU seconds (what bounds the wall when the other core is free: a busy
machine's wall time hides it), median of --repeat runs each, the ways alternating in one
process, the bits checked equal (cycles, DRAM image).

    .venv/bin/python bench/bench_emulator_two_cores.py [--seq 1024] [--repeat 3]

Lowers the layer once (`dse.numerics.run.emulate_recipe`, its run caught, not timed). Each
run gets an image as the lowering leaves one: a fresh zero array (pages not yet resident)
with the lowering's nonzero 2 MB chunks copied in, so that the run meets fresh pages as
`dse emulate` does. Takes a minute or two at seq 1024; not run by tests.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
from layer_program import lowered_layer  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    from emulator import _functional_core as fc
    from emulator import coreops, prefault

    caught = lowered_layer(args.seq, "dse-two-cores-")
    inner = caught["run"]
    img = caught["image"]
    C = prefault.CHUNK
    nonzero = [k for k in range(-(-img.size // C)) if img[k * C:(k + 1) * C].any()]

    def fresh() -> np.ndarray:
        out = np.zeros(img.size, np.uint8)
        for k in nonzero:
            out[k * C:(k + 1) * C] = img[k * C:(k + 1) * C]
        return out

    never = 1 << 62
    split, min_image, shared = fc.split_threshold(), prefault.MIN_IMAGE, coreops.SHARED_ELEMENTS
    ops = 1 << 22  # core ops of 4M elements on two threads
    ways = {"one core (main)": (never, never, never), "prefault helper": (never, min_image, never),
            "split products": (split, never, never), "split core ops": (never, never, ops),
            "prefault + products": (split, min_image, never), "all three": (split, min_image, ops)}
    walls, cpus, mains, digests = {w: [] for w in ways}, {w: [] for w in ways}, {w: [] for w in ways}, {}
    inner(caught["program"], caught["chip"], fresh(), in_place=True, **caught["kw"])  # warm-up, untimed
    for _ in range(args.repeat):
        for way, (macs, least, elements) in ways.items():
            fc.split_threshold(macs)
            prefault.MIN_IMAGE = least
            coreops.SHARED_ELEMENTS = elements
            image = fresh()
            t, c, m = time.perf_counter(), time.process_time(), time.thread_time()
            res = inner(caught["program"], caught["chip"], image, in_place=True, **caught["kw"])
            mains[way].append(time.thread_time() - m)
            walls[way].append(time.perf_counter() - t)
            cpus[way].append(time.process_time() - c)
            digests[way] = (res.cycles, hashlib.sha1(res.dram).hexdigest())
            del res, image
    fc.split_threshold(split)
    prefault.MIN_IMAGE = min_image
    coreops.SHARED_ELEMENTS = shared
    assert len(set(digests.values())) == 1, digests
    print(f"llama layer seq {args.seq}: image {img.nbytes / 2**30:.2f} GB ({len(nonzero) * C / 2**30:.2f} GB written "
          f"by the lowering), load {os.getloadavg()[0]:.1f}, median of {args.repeat}")
    base = statistics.median(walls["one core (main)"])
    base_main = statistics.median(mains["one core (main)"])
    print(f"{'way':<20} {'wall s':>7} {'CPU s':>7} {'run thread CPU s':>17} {'wall ratio':>11} "
          f"{'run thread ratio':>17}")
    for way in ways:
        w, m = statistics.median(walls[way]), statistics.median(mains[way])
        print(f"{way:<20} {w:7.2f} {statistics.median(cpus[way]):7.2f} {m:17.2f} {w / base:11.2f} "
              f"{m / base_main:17.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
