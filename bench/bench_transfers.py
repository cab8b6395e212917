"""The functional pass's MVIN/MVOUT on their own: 9,000 transfers of 256 lines into and out of
one-, two- and four-column banks on goban (rows of 16, 32 and 64 bytes), 25 runs; prints the
minimum and median host seconds of the functional pass. Compare two trees by running it
under each (alternating, on a busy machine the minimum is the figure to trust):

    PYTHONPATH=<old tree> .venv/bin/python bench/bench_transfers.py
    PYTHONPATH=<new tree> .venv/bin/python bench/bench_transfers.py
"""

from __future__ import annotations

import statistics
import sys
import tomllib
from pathlib import Path

import numpy as np

from emulator import Fence, Mset, Mvin, Mvout, Program, run
from emulator.chip import chip_from_dict

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    with open(REPO / "chip_configs" / "goban.toml", "rb") as f:
        chip = chip_from_dict(tomllib.load(f))
    body = [Mset(0, 1), Mset(1, 2), Mset(2, 4)]
    for k in range(3000):
        body += [Mvin(0, (k * 4096) % (1 << 20), 256), Mvin(1, (k * 8192) % (1 << 20), 256),
                 Mvout(2, (1 << 20) + (k % 64) * 4096, 256)]
    body.append(Fence())
    prog = Program([body], dram_bytes=1 << 21)
    img = np.random.default_rng(0).integers(0, 256, 1 << 21, dtype=np.uint8)
    ts = [run(prog, chip, img).counters.value("host_functional_seconds") for _ in range(25)]
    print(f"{__import__('emulator').__file__}: functional pass min {min(ts):.4f} s, median {statistics.median(ts):.4f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
