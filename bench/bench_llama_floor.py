"""The floor of one Llama-3-8B-shaped decoder layer's host time (#35): how fast its float
forwards and the emulator's arithmetic run against the plain kernels they are made of, in
one process (ratios measured side by side; CPU seconds, as the machine is shared).

- float: the recipe's module forward (the float reference) and the captured graph's trace
  (our interpreter: the capture check's and calibration's forward) against plain
  `torch.matmul` of the same products (the seven projections and attention's two batched
  products at the layer's shapes), in GFLOP/s of the products' 2 * MACs;
- int8: the emulator's run of the quantized layer (functional + timing passes; the
  functional pass's own share from its host counters) against `torch._int_mm` alone over
  the same products' int8 operands, in GOPS of 2 * the matrix Ball's MACs; a row for each
  product kernel of --kernels (`emulator/_functional_kernels.h`; default: the one in use and
  vnni16, the previous one), their final DRAM images checked identical.

    .venv/bin/python bench/bench_llama_floor.py [--seq 2048] [--runs 3] [--chip goban] [--workers 4]
        [--kernels vnni8,vnni16] [--no-int-mm]

Medians of --runs runs each. The frontend (capture, steps, checks) runs once, with an empty
graph cache, untimed. Takes minutes at seq 2048; not run by the tests.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from timing import runs_of  # (bench/: this script's folder)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
LAYER = dict(dim=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336)


def timed(fn, runs: int) -> tuple[float, float]:
    """Median (wall, CPU) seconds of `fn()` over `runs` runs."""
    got = runs_of(fn, runs)
    return statistics.median(got.walls), statistics.median(got.cpus)


def products(seq: int) -> list[tuple[int, int, int, int]]:
    """(batch, M, K, N) of the layer's products: q, k, v, o, gate, up, down; scores, PV."""
    d, h, kv, hd, f = (LAYER[k] for k in ("dim", "heads", "kv_heads", "head_dim", "ffn"))
    group = h // kv
    return ([(1, seq, d, n) for n in (h * hd, kv * hd, kv * hd)] + [(1, seq, h * hd, d)]
            + [(1, seq, d, f), (1, seq, d, f), (1, seq, f, d)]
            + [(kv, group * seq, hd, seq), (kv, group * seq, seq, hd)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chip", default="goban")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--kernels", default=None, help="comma-separated product kernels, one row each")
    ap.add_argument("--no-int-mm", action="store_true",
                    help="no torch._int_mm row (without AVX-512 it is a reference loop: hours at seq 2048)")
    args = ap.parse_args()
    os.environ["DSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dse-floor-")
    atexit.register(shutil.rmtree, os.environ["DSE_CACHE_DIR"], True)  # a seq-2048 cache is 2 GB
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # as `dse emulate` sets it
    import torch

    import emulator
    from emulator import _functional_core as fc
    from dse.chips import load_chip
    from dse.mapping import Candidate, Mapping
    from dse.numerics.emitted import emit_graph
    from dse.numerics.run import prepare_recipe
    from dse.workload.recipes import instantiate, load_recipe, run_module

    params = {"seq": args.seq, **LAYER}
    shapes = products(args.seq)
    flops = sum(2 * b * m * k * n for b, m, k, n in shapes)
    print(f"llama_layers {params}: {len(shapes)} products, {flops / 1e9:.0f} GFLOP; torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads; medians of {args.runs}")

    recipe = load_recipe("llama_layers")
    module, inputs = instantiate(recipe, **params)
    prep = prepare_recipe("llama_layers", params)  # untimed: the frontend, for the graphs below
    captured = prep.pipe.graphs[0]
    floats = [(torch.randn(b, m, k), torch.randn(b, k, n) if b > 1 else torch.randn(k, n)) for b, m, k, n in shapes]
    rows = [("plain torch.matmul of the products", timed(lambda: [torch.matmul(a, w) for a, w in floats], args.runs)),
            ("module forward (the float reference)", timed(lambda: run_module(recipe, module, inputs), args.runs)),
            ("captured graph's trace (our interpreter)", timed(lambda: captured.run(*inputs), args.runs))]
    del floats
    plain_cpu = rows[0][1][1]
    print(f"{'float forward':<44} {'wall s':>7} {'CPU s':>7} {'GFLOP/s CPU':>12} {'x plain':>8}")
    for name, (wall, cpu) in rows:
        print(f"{name:<44} {wall:7.2f} {cpu:7.2f} {flops / 1e9 / cpu:12.1f} {plain_cpu / cpu:8.2f}")

    ints = [(torch.randint(-128, 128, (b * m, k), dtype=torch.int8), torch.randint(-128, 128, (k, n), dtype=torch.int8))
            for b, m, k, n in shapes[:7]]
    ints += [(torch.randint(-128, 128, (m, k), dtype=torch.int8), torch.randint(-128, 128, (k, n), dtype=torch.int8))
             for b, m, k, n in shapes[7:] for _ in range(b)]  # a batched product: one 2-D product a matrix
    int_mm = None if args.no_int_mm else timed(lambda: [torch._int_mm(a, w) for a, w in ints], args.runs)
    del ints
    chip = load_chip(args.chip)
    candidate = Candidate(chip, Mapping(workers=args.workers))
    emitted = emit_graph(prep.graph, candidate, prep.inputs)
    low = emitted.lowereds[0][1]
    kernels = args.kernels.split(",") if args.kernels else [fc.kernel_in_use()] + [
        k for k in ("vnni16",) if k in fc.kernels() and k != fc.kernel_in_use()]
    print(f"{'int8':<44} {'wall s':>7} {'CPU s':>7} {'GOPS CPU':>12} {'x _int_mm':>9}")
    if int_mm:
        print(f"{'torch._int_mm of the products':<44} {int_mm[0]:7.2f} {int_mm[1]:7.2f} "
              f"{flops / 1e9 / int_mm[1]:12.1f} {1.0:9.2f}")

    def vs_int_mm(cpu: float) -> str:
        return f"{int_mm[1] / cpu:9.2f}" if int_mm and cpu else f"{'-':>9}"
    was, images = fc.kernel_in_use(), set()
    for kernel in kernels:
        fc.use_kernel(kernel)
        runs, result = [], None
        for _ in range(args.runs):
            image = low.image.copy()
            wall, cpu = time.perf_counter(), time.process_time()
            result = emulator.run(low.program, chip, image, in_place=True)
            runs.append((time.perf_counter() - wall, time.process_time() - cpu,
                         result.counters.total("host_functional_seconds"), result.counters.total("host_exec_seconds")))
            del image
        images.add(hashlib.sha256(result.dram).hexdigest())
        wall, cpu, functional, executed = (statistics.median(r[i] for r in runs) for i in range(4))
        macs = int(result.counters.total("ball_macs", ball="matrix"))
        share = functional / executed if executed else 0.0
        print(f"{f'emulator run, {kernel} (functional + timing)':<44} {wall:7.2f} {cpu:7.2f} "
              f"{2 * macs / 1e9 / cpu:12.1f} {vs_int_mm(cpu)}")
        print(f"{'  its functional pass (share of host exec)':<44} {'':7} {cpu * share:7.2f} "
              f"{2 * macs / 1e9 / (cpu * share) if share else 0:12.1f} {vs_int_mm(cpu * share)}")
    fc.use_kernel(was)
    print(f"final DRAM images of the {len(kernels)} kernels: {'identical' if len(images) == 1 else 'DIFFER'}")
    print(f"matrix Ball MACs {macs:,} (products' {flops // 2:,}); cycles {result.cycles:,}; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
