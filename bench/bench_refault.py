"""What a fresh block of memory costs to fault in on this machine, by how long its pages were
free: a 512 MB numpy array (its own mapping, huge pages) filled and freed, again and again,
after a pause of 0, 1 and 3 seconds; the kernel (system) seconds of each fill, median of
`--runs`, and their GB rate. On a virtual machine whose balloon reports free memory to its host
(virtio-balloon free page reporting: blocks of 2 MB and up, about 2 s after they are freed;
`cat /sys/bus/virtio/devices/*/features`, bit 5 of the balloon's), pages free for longer than
that are backed again by the host when touched: on this machine, idle, 2.05 s a GB after 3 s
against 0.07 s a GB after 0 s (2026-12-07). Pages another process freed a moment before
serve as well: on a busy machine the 3 s rows come out cheaper. Why a layer's run spends a
third of its CPU in the kernel (bench_llama_phases.py's sys column).

    .venv/bin/python bench/bench_refault.py [--runs 5] [--mb 512]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def fill_seconds(n: int) -> float:
    """Kernel seconds to allocate and fill n bytes (then freed)."""
    before = os.times().system
    a = np.empty(n, dtype=np.uint8)
    a.fill(1)
    spent = os.times().system - before
    del a
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=int, default=512)
    args = ap.parse_args()
    n = args.mb << 20
    fill_seconds(n)  # the first fill: pages this process never had
    for pause in (0.0, 1.0, 3.0):
        spent = []
        for _ in range(args.runs):
            time.sleep(pause)
            spent.append(fill_seconds(n))
        med = statistics.median(spent)
        print(f"pause {pause:3.0f} s: fill of {args.mb} MB {med:6.3f} s kernel (median of {args.runs}), "
              f"{med / (n / 1e9):5.2f} s a GB")
    print(f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
