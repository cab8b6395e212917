"""`dse chips list|show|validate|costs`."""

from __future__ import annotations

import json

from .common import parse_overrides


def cmd_chips(args) -> int:
    from ..chips import chip_hash, list_chips, load_chip

    if args.action == "list":
        print(f"{'name':<10} {'cores':>5} {'banks':>5} {'rows':>6} {'row B':>5} {'SRAM/core':>10}  balls  hash")
        for name in list_chips():
            c = load_chip(name)
            print(f"{name:<10} {c.cores.count:>5} {c.banks.count:>5} {c.banks.rows:>6} {c.banks.row_bytes:>5} "
                  f"{c.private_sram_bytes:>10,}  {','.join(b.kind for b in c.balls)}  {chip_hash(c)[:12]}")
    elif args.action == "show":
        c = load_chip(args.name, parse_overrides(args.set), overrides_source="--set")
        print(json.dumps(c.data_with_limits(), indent=2))
        print(f"hash: {chip_hash(c)}")
    elif args.action == "costs":
        from ..ppa.components import checked_table

        source = "--set" if args.set else args.name
        c = load_chip(args.name, parse_overrides(args.set), overrides_source="--set")
        table = checked_table(c, source)
        if args.json:
            print(json.dumps({"chip": c.name, "node_nm": table.node_nm, "sram_cell": table.sram_cell,
                              "temperature_k": table.temperature_k, "figures": table.rows()}, indent=2))
        else:
            print_costs(c, table)
    else:  # validate
        from ..ppa.components import checked_table

        c = load_chip(args.name)
        checked_table(c, args.name)  # every component can be priced (CACTI organises its memories)
        print(f"{args.name}: valid chip '{c.name}', hash {chip_hash(c)}")
    return 0


def print_costs(chip, table) -> None:
    """The component table: each figure, its value and where it comes from."""
    print(f"chip {chip.name}: {table.node_nm} nm, SRAM cells {table.sram_cell} at {table.temperature_k} K, "
          f"clock {chip.clock_mhz:g} MHz")
    print(f"| component | per | figure | value | source |")
    print("|---|---|---|---:|---|")
    for r in table.rows():
        print(f"| {r['component']} | {r['instance']} | {r['figure']} | {r['value']:.4g} {r['unit']} | {r['source']} |")
    for name, sram in table.sram.items():
        if sram is not None and sram.cycle_ns > 1e3 / chip.clock_mhz:
            print(f"note: CACTI's {name} bank cycles in {sram.cycle_ns:.3g} ns, slower than the "
                  f"{chip.clock_mhz:g} MHz clock's {1e3 / chip.clock_mhz:.3g} ns (the emulator assumes one access a cycle)")


def register(sub) -> None:
    chips = sub.add_parser("chips", help="list, show and validate chip configs")
    csub = chips.add_subparsers(dest="action", required=True)
    csub.add_parser("list", help="the shipped chip configs")
    show = csub.add_parser("show", help="a chip config in full, with its identity hash")
    show.add_argument("name", help="shipped chip name or path to a TOML file")
    show.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. cores.count=16")
    val = csub.add_parser("validate", help="check a chip config file (CACTI prices its memories)")
    val.add_argument("name", help="path to a TOML file (or a shipped name)")
    costs = csub.add_parser("costs", help="each component's area, energy per action and leakage, with its source")
    costs.add_argument("name", help="shipped chip name or path to a TOML file")
    costs.add_argument("--set", action="append", metavar="KEY=VALUE",
                       help="override a field, e.g. technology.node_nm=28 or costs.dram.byte_pj=40")
    costs.add_argument("--json", action="store_true", help="the table as JSON")
    chips.set_defaults(func=cmd_chips)
