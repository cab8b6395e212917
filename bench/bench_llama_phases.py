"""Where one Llama-3-8B-shaped layer's `dse emulate` spends its time and memory, phase by
phase, in one process: the recipe's module (load, forward), the capture, each frontend
stage (its check's trace; quantize's calibration and integer check), the vacuous check,
the graph cache's write, then lowering, the emulator's run and the comparison. Each line:
wall and CPU seconds of the phase, that CPU split into user and kernel time (the kernel's is
mostly faulting in memory the process has not held before: a trace that keeps every value
grows the process past the module forward's peak; on a virtual machine whose balloon
reports free memory to its host, pages free for more than about 2 s cost about 2 s a GB to
fault in again, pages freed a moment before 0.06 s a GB: `bench/bench_refault.py`), the
resident set after it, the phase's own peak (VmHWM, reset as each phase starts and ends: a
nested phase's peak is its own, the outer row's the rest of it) and the run's peak so far.

    .venv/bin/python bench/bench_llama_phases.py [--seq 2048] [--recipe llama_prefill]
        [--chip goban] [--workers 4] [--layers N]

`DSE_BENCH_TREE=<another checkout>` measures that tree (its extensions built) with this bench.

`--cache DIR`: that graph cache, kept (run twice: the second run is served the capture and
the checked frontend, as any further run of the layer is).

`--layers N`: the whole model instead (`recipes/llama3_8b`'s chain cut to N layers, as `dse
emulate --recipe llama3_8b` streams it): layer 0 checked in full, later layers reusing its
checked structure; each row names its layer.

The phases are timed by wrapping the pipeline's own functions (nothing is run twice); the
graph cache is a temporary folder (a cold run). Takes minutes at seq 2048; not run by tests.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# the tree measured: this one, or DSE_BENCH_TREE=<another checkout, its extensions built>, for a
# before/after pair from one copy of the bench
REPO = Path(os.environ.get("DSE_BENCH_TREE") or Path(__file__).resolve().parents[1])
if not (REPO / "dse" / "__init__.py").is_file():
    sys.exit(f"bench_llama_phases: DSE_BENCH_TREE={REPO} holds no dse package (give a checkout's root)")
sys.path.insert(0, str(REPO))
LAYER = dict(dim=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336)


PEAK = [0.0]  # the run's peak so far, GB: VmHWM is reset at each phase's start and end


def memory() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in GB; VmHWM since the last `reset_peak`."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    rss, hwm = (int(fields[k].split()[0]) * 1024 / 1e9 for k in ("VmRSS", "VmHWM"))
    PEAK[0] = max(PEAK[0], hwm)
    return rss, hwm


def reset_peak() -> None:
    """VmHWM back to the resident set (Linux: clear_refs 5), after taking it into PEAK."""
    memory()
    Path("/proc/self/clear_refs").write_text("5")


ROWS: list[tuple] = []
LAYER_NOW = [""]  # the chain's layer being run ("" for one recipe)


def timed(owner, attr: str, label):
    """Wrap owner.attr so that each call adds a row (label may be a function of the args)."""
    inner = getattr(owner, attr)

    def wrapper(*args, **kwargs):
        reset_peak()
        wall, cpu = time.perf_counter(), os.times()
        try:
            return inner(*args, **kwargs)
        finally:
            name = label(*args, **kwargs) if callable(label) else label
            rss, hwm = memory()
            now = os.times()
            user, system = now.user - cpu.user, now.system - cpu.system
            ROWS.append((LAYER_NOW[0] + name, time.perf_counter() - wall, user + system, user, system, rss, hwm,
                         PEAK[0]))
            reset_peak()

    setattr(owner, attr, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--recipe", default="llama_prefill")
    ap.add_argument("--chip", default="goban")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--layers", type=int, help="the whole model (llama3_8b's chain) cut to this many layers")
    ap.add_argument("--cache", type=Path, help="this graph cache folder, kept (default: a temporary one, removed)")
    args = ap.parse_args()
    if args.cache:
        os.environ["DSE_CACHE_DIR"] = str(args.cache.resolve())
    else:
        os.environ["DSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="dse-phases-")
        atexit.register(shutil.rmtree, os.environ["DSE_CACHE_DIR"], True)  # a seq-2048 cache is 2 GB
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")  # as `dse emulate` sets it
    start_wall, start_cpu = time.perf_counter(), os.times()
    import emulator
    import dse.frontend.pipeline as pipeline
    import dse.frontend.quantize as quantize
    import dse.numerics.run as run
    import dse.workload.cache as cache
    import dse.workload.capture  # noqa: F401 - its module (dse.workload exports a function of that name)
    from dse.chips import load_chip
    from dse.mapping import Mapping

    now = os.times()
    user, system = now.user - start_cpu.user, now.system - start_cpu.system
    ROWS.append(("imports", time.perf_counter() - start_wall, user + system, user, system, *memory(), PEAK[0]))
    # the pipeline's own names (it imported them from recipes): wrapping recipes' would miss them
    timed(pipeline, "instantiate", "recipe load() + inputs()")
    timed(pipeline, "run_module", "module forward (expected)")
    timed(sys.modules["dse.workload.capture"], "capture", "capture (torch.export)")
    timed(pipeline, "check_graph", lambda graph, ctx, tol: f"stage check trace ({len(graph.ops)} ops)")
    timed(pipeline, "_check_vacuous", "vacuous check (module on redrawn inputs)")
    import dataclasses

    import dse.frontend.permute as permute
    import dse.frontend.steps as steps

    timed(quantize, "run", "quantize: calibrate + rewrite")
    timed(quantize, "verify", "quantize: integer check (numpy)")
    timed(permute, "run", "permute: rewrite")
    steps.BUILTIN["quantize"] = dataclasses.replace(steps.BUILTIN["quantize"], run=quantize.run, verify=quantize.verify)
    steps.BUILTIN["permute"] = dataclasses.replace(steps.BUILTIN["permute"], run=permute.run)
    timed(cache, "store", "graph cache write")
    timed(cache, "load", "graph cache read")
    timed(run, "emit_graph", "lower (plan, program, DRAM image)")
    timed(emulator, "run", "emulator run (functional + timing)")
    timed(run, "StreamedReference", "reference (start)")
    timed(run, "compare", "compare (incl. streamed reference)")
    if hasattr(run, "BoundaryCheck"):  # the ops checked at their BARRIERs, inside the emulator's run row
        timed(run, "BoundaryCheck", "boundary checks: DRAM touches and buffers")
        timed(run, "verdict", "verdict (ops checked in the run; outputs)")
    timed(run, "run_reused", "reused layer's frontend (whole; rows above)")  # as prepare_recipe calls it
    timed(run, "emulate_graph", "emulate_graph (whole; rows above)")
    reset_peak()
    if args.layers:
        import dse.numerics.chain as chain

        timed(chain, "_checks", "chain end: vs the float chain")
        original = chain.prepare_recipe

        def prepare(recipe, params, **kwargs):
            LAYER_NOW[0] = f"L{params.get('layer', 0)} "
            return original(recipe, params, **kwargs)

        chain.prepare_recipe = prepare
        stages = chain.with_params(chain.load_chain(REPO / "recipes" / "llama3_8b" / "chain.toml"),
                                   {"seq": args.seq})[:args.layers]
        graphs, rep = chain.check_chain(stages, load_chip(args.chip), Mapping(workers=args.workers), keep_outputs=False)
        print(f"llama3_8b, {args.layers} layer(s) at seq {args.seq} on {args.chip} x{args.workers}:")
        print("\n".join(rep.lines()))
    else:
        params = {"seq": args.seq, **LAYER, **({"layers": 1} if args.recipe == "llama_prefill" else {})}
        rep = run.emulate_recipe(args.recipe, load_chip(args.chip), Mapping(workers=args.workers), params)
        print(f"{args.recipe} {params} on {args.chip} x{args.workers}: "
              f"{rep.verdict.summary() if rep.verdict else rep.reason}")
        print(f"cycles {rep.cycles:,}")
    now = os.times()
    total_wall = time.perf_counter() - start_wall
    total_user, total_sys = now.user - start_cpu.user, now.system - start_cpu.system
    print(f"{'phase':<48} {'wall s':>8} {'CPU s':>8} {'user s':>7} {'sys s':>7} {'RSS GB':>7} {'its peak':>8} "
          f"{'peak GB':>8}")
    for name, wall, cpu, user, system, rss, hwm, peak in ROWS:
        print(f"{name:<48} {wall:8.1f} {cpu:8.1f} {user:7.1f} {system:7.1f} {rss:7.2f} {hwm:8.2f} {peak:8.2f}")
    rss, _ = memory()
    print(f"{'total':<48} {total_wall:8.1f} {total_user + total_sys:8.1f} {total_user:7.1f} {total_sys:7.1f} "
          f"{rss:7.2f} {'':8} {PEAK[0]:8.2f}  load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
