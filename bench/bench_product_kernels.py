"""The functional pass's int8 product kernels (`emulator/_functional_kernels.h`) on their own,
side by side in one process: each kernel this CPU runs and `torch._int_mm` (one thread) on
the chain shapes of one Llama-3-8B-shaped layer on goban x4 (M x N x K of the chains the
emulator applies: the projections' 64 x 256 x 4096 and 64 x 128 x 14336, attention's), in
GMAC/s of CPU time, with ratios to the previous kernels (vnni8 / vnni16, avx2 / avx2_v1, where
the CPU runs both) and of the best kernel to `_int_mm`.

    .venv/bin/python bench/bench_product_kernels.py [--runs 5] [--macs 3e8] [--generic]

Medians of --runs runs, each of enough products for about --macs multiply-accumulates; the
operands are laid out as a chain keeps them (`_functional_core.matmul_nt`) once, untimed.
Not run by the tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(64, 256, 4096), (64, 128, 14336), (16, 64, 2048), (16, 128, 128)]
PAIRS = [("vnni8", "vnni16"), ("avx2", "avx2_v1")]  # a kernel and the one it replaced


def cpu_median(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--macs", type=float, default=3e8)
    ap.add_argument("--generic", action="store_true", help="the plain C kernel too (slow)")
    args = ap.parse_args()
    import torch

    from emulator import _functional_core as fc

    torch.set_num_threads(1)
    names = [n for n in fc.kernels() if args.generic or n != "generic"]
    print(f"kernels {', '.join(names)} (in use: {fc.kernel_in_use()}); torch {torch.__version__} 1 thread; "
          f"medians of {args.runs}; GMAC/s of CPU time")
    pairs = [(new, old) for new, old in PAIRS if {new, old} <= set(names)]
    print(f"{'M x N x K':<18}" + "".join(f"{n:>9}" for n in names) + f"{'_int_mm':>9}"
          + "".join(f"{new + '/' + old:>16}" for new, old in pairs) + f"{'x _int_mm':>10}")
    rng = np.random.default_rng(0)
    for M, N, K in SHAPES:
        a = rng.integers(-128, 128, (M, K), dtype=np.int8)
        b = rng.integers(-128, 128, (N, K), dtype=np.int8)
        reps = max(1, int(args.macs // (M * N * K)))
        rates = {}
        for name in names:  # matmul_nt's layout copy is outside the timed repeats' share
            one = cpu_median(lambda: fc.matmul_nt(a, b, name, 1), args.runs)
            many = cpu_median(lambda: fc.matmul_nt(a, b, name, reps + 1), args.runs)
            rates[name] = M * N * K * reps / max(many - one, 1e-9) / 1e9
        ta, tb = torch.from_numpy(a), torch.from_numpy(np.ascontiguousarray(b.T))
        rates["_int_mm"] = M * N * K * reps / cpu_median(lambda: [torch._int_mm(ta, tb) for _ in range(reps)],
                                                         args.runs) / 1e9
        best = rates[names[0]]
        line = f"{f'{M} x {N} x {K}':<18}" + "".join(f"{rates[n]:9.1f}" for n in names + ["_int_mm"])
        line += "".join(f"{rates[new] / rates[old]:16.2f}" for new, old in pairs)
        print(line + f"{best / rates['_int_mm']:10.2f}")
    print(f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
