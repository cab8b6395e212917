"""`dse emulate-matmul`: run the emulator on a tiled int8 matmul and print its counters."""

from __future__ import annotations

import json

from .common import parse_overrides

# Bounds of the example program: each matrix at most MAX_DIM on a side, and at most
# MAX_TILE_PRODUCTS tile products (a billion-row matmul would run for days, not fail).
MAX_DIM = 8192
MAX_TILE_PRODUCTS = 1 << 18


def cmd_emulate(args) -> int:
    import numpy as np

    from emulator import VERSION, EmulatorError, run
    from emulator.programs import matmul_inputs, tiled_matmul

    from ..chips import load_chip
    from ..errors import InputError

    chip = load_chip(args.chip, parse_overrides(args.set), overrides_source="--set")
    M, N, K = args.size
    tm, tn, tk = args.tile
    for flag, values in (("--size", args.size), ("--tile", args.tile)):
        bad = [v for v in values if not 1 <= v <= MAX_DIM]
        if bad:
            raise InputError("(command line)", flag, bad[0], f"sizes 1..{MAX_DIM}")
    if args.tile and any(t > d for t, d in zip(args.tile, args.size)):
        raise InputError("(command line)", "--tile", args.tile, f"tiles no larger than the sizes {args.size}")
    products = -(-M // tm) * -(-N // tn) * -(-K // tk)
    if products > MAX_TILE_PRODUCTS:
        raise InputError("(command line)", "--size/--tile", f"{args.size} / {args.tile}",
                         f"at most {MAX_TILE_PRODUCTS:,} tile products (M/TM x N/TN x K/TK; these give {products:,})")
    if not 1 <= args.cores <= chip.cores.count:
        raise InputError("(command line)", "--cores", args.cores, f"1..{chip.cores.count} (cores of {chip.name})")
    try:
        prog = tiled_matmul(M, N, K, tm, tn, tk, cores=args.cores, layout=args.layout, dataflow=args.dataflow,
                            fence_after_mvout=not args.no_fence)
    except ValueError as exc:
        raise InputError("--size/--tile", "tile", f"{args.size} / {args.tile}", str(exc)) from None
    a, bt, vals = matmul_inputs(M, N, K, tm, tn, tk, layout=args.layout)
    modes = ("serial", "overlapped") if args.mode == "both" else (args.mode,)
    report = {"emulator": VERSION, "chip": chip.name, "program": prog.name, "instructions": prog.n_instructions,
              "modes": {}}
    for mode in modes:
        try:
            r = run(prog, chip, vals, mode=mode, trace=bool(args.trace))
        except EmulatorError as exc:
            print(f"dse emulate: {exc}")
            return 1
        ok = bool(np.array_equal(r.outputs["C"], a.astype(np.int32) @ bt.T.astype(np.int32)))
        cs = r.counters
        entry = {"cycles": r.cycles, "matches_numpy": ok,
                 "host_seconds": cs.value("host_setup_seconds") + cs.value("host_exec_seconds")}
        for c in range(len(prog.cores)):
            entry[f"core{c}"] = {n: cs.value(n, core=c) for n in (
                "cycles", "busy_cycles", "idle_cycles", "stall_dependence_cycles", "stall_ball_queue_cycles",
                "stall_channel_cycles", "stall_dma_cycles", "stall_fence_cycles", "stall_barrier_cycles",
                "dma_bytes_in", "dma_bytes_out", "peak_allocated_bytes")}
            entry[f"core{c}"]["matrix_busy_cycles"] = cs.value("ball_busy_cycles", core=c, ball="matrix")
        if args.trace:
            r.trace.write(f"{args.trace}/{mode}")
            entry["trace"] = f"{args.trace}/{mode}"
        report["modes"][mode] = entry
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['emulator']} on {chip.name}: {prog.name}, {prog.n_instructions} instructions")
    for mode, e in report["modes"].items():
        print(f"  {mode:<10} {e['cycles']:>12,} cycles  output {'matches' if e['matches_numpy'] else 'DIFFERS from'} "
              f"numpy  ({e['host_seconds']:.2f} host s)")
    if len(modes) == 2:
        s, o = report["modes"]["serial"]["cycles"], report["modes"]["overlapped"]["cycles"]
        print(f"  serial / overlapped = {s / o:.3f}")
    return 0 if all(e["matches_numpy"] for e in report["modes"].values()) else 1


def register(sub) -> None:
    # `dse emulate` runs recipes (emulate.py); this is the emulator's own example program.
    mm = sub.add_parser("emulate-matmul", help="the emulator alone on a tiled int8 matmul, checked against numpy")
    mm.add_argument("--chip", default="toy", help="shipped chip name or TOML path")
    mm.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a chip field, e.g. dma.latency_cycles=50")
    mm.add_argument("--size", type=int, nargs=3, default=[128, 128, 128], metavar=("M", "N", "K"))
    mm.add_argument("--tile", type=int, nargs=3, default=[32, 32, 32], metavar=("TM", "TN", "TK"))
    mm.add_argument("--cores", type=int, default=1)
    mm.add_argument("--layout", choices=["blocked", "rowmajor"], default="blocked")
    mm.add_argument("--dataflow", choices=["ws", "os", "is"], default="ws")
    mm.add_argument("--no-fence", action="store_true", help="no FENCE after each MVOUT")
    mm.add_argument("--mode", choices=["overlapped", "serial", "both"], default="both")
    mm.add_argument("--trace", metavar="DIR", help="write itrace/mtrace/pmctrace NDJSON files here")
    mm.add_argument("--json", action="store_true", help="print the counters as JSON")
    mm.set_defaults(func=cmd_emulate)
