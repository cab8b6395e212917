"""`dse emulate --chip NAME|FILE --recipe NAME|PATH [--mapping POLICY] [--workers N] [--json]`.

Runs capture -> frontend steps -> mapping -> lowering -> emulator and compares the outputs
with PyTorch (bit for bit against the quantized reference on the integer path, within the
declared tolerance against the float model). Prints cycles, counters, peak private SRAM
and the numerics verdict; ``--json`` prints them as one JSON object. Exit 0 when the
numerics pass, 1 when they do not, 3 when the candidate is infeasible, 2 on bad input.

`dse emulate matmul ...` (the emulator's own example, `dse/cli/emulator.py`) shares the
``emulate`` parser: this module creates it, and hands the emulator module a view of it
when that module registers, so both forms parse.
"""

from __future__ import annotations

import json

from .common import parse_overrides

POLICIES = ("framework", "search")


def cmd_emulate_recipe(args) -> int:
    from ..chips import load_chip
    from ..errors import InputError
    from ..mapping import Mapping
    from ..numerics import emulate_recipe
    from ..workload.recipes import load_recipe

    if not args.chip or not args.recipe:
        missing = "--chip" if not args.chip else "--recipe"
        raise InputError("(command line)", missing, None, "a chip name or TOML path and a recipe name or folder")
    overrides = parse_overrides(args.set)
    chip = load_chip(args.chip, overrides, overrides_source="--set")
    if args.workers < 1 or args.workers > chip.cores.count:
        raise InputError("(command line)", "--workers", args.workers, f"1..{chip.cores.count} (cores of {chip.name})")
    load_recipe(args.recipe)  # InputError for an unknown recipe
    params = parse_overrides(args.param)
    mapping = Mapping(policy=args.mapping, workers=args.workers, split=args.split, dataflow=args.dataflow)
    rep = emulate_recipe(args.recipe, chip, mapping, params, check_unmodified=args.check_unmodified,
                         partition=args.partition)
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2, default=str))
    else:
        print(f"recipe {rep.recipe} on {rep.chip}: policy {args.mapping}, {args.workers} worker(s), split {args.split}")
        if not rep.feasible:
            print(f"infeasible: {rep.reason}")
        else:
            c = rep.counters
            print(f"emulated cycles       {rep.cycles:,}")
            print(f"peak private SRAM     {rep.peak_sram_bytes:,} B of {rep.private_sram_bytes:,} B per worker "
                  f"(per worker: {' '.join(f'{v:,}' for v in c['peak_allocated_bytes'])})")
            for k in ("instructions", "core_op_cycles", "matrix_busy_cycles", "dma_bytes_in", "dma_bytes_out",
                      "dma_bursts"):
                print(f"{k:<21} {' '.join(f'{v:,}' for v in c[k])}")
            for o in rep.ops:
                if "spans" in o:
                    print(f"  temporal spans (owned output rows per worker): {o['spans']}")
                elif o["how"] == "matrix":
                    print(f"  {o['op']}: matrix Ball, tile {'x'.join(map(str, o['tile']))}, batch {o['batch']}, "
                          f"{o['banks']} banks, {o['workers_used']} worker(s)")
            print(f"numerics              {rep.verdict.summary()}")
            if rep.verdict.unmodified is not None:
                print(f"unmodified graph      {rep.verdict.unmodified}")
    if not rep.feasible:
        return 3
    return 0 if rep.verdict.passed else 1


def register(sub) -> None:
    emu = sub.add_parser("emulate", help="run a recipe on a chip in the emulator and check it against PyTorch")
    emu.add_argument("--chip", help="shipped chip name or TOML path")
    emu.add_argument("--recipe", help="recipe name or a folder with a model.py")
    emu.add_argument("--mapping", choices=POLICIES, default="search", help="tile policy (default search)")
    emu.add_argument("--workers", type=int, default=1, help="cores the products are split across")
    emu.add_argument("--split", choices=("rows", "cols"), default="rows", help="how outputs are split")
    emu.add_argument("--dataflow", choices=("ws", "os", "is"), default="ws")
    emu.add_argument("--partition", choices=("tiles", "spans"), default="tiles",
                     help="tiles: each product's output tiles split across workers (a barrier per op); "
                          "spans: temporal spans with halos, each worker runs the whole stack")
    emu.add_argument("--param", action="append", metavar="KEY=VALUE", help="a recipe parameter, e.g. batch=8")
    emu.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a chip field")
    emu.add_argument("--check-unmodified", action="store_true",
                     help="also lower and check the captured graph before the frontend steps")
    emu.add_argument("--json", action="store_true", help="print the report as JSON")
    emu.set_defaults(func=cmd_emulate_recipe)
