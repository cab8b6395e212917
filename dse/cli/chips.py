"""`dse chips list|show|validate`."""

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
    else:  # validate
        c = load_chip(args.name)
        print(f"{args.name}: valid chip '{c.name}', hash {chip_hash(c)}")
    return 0


def register(sub) -> None:
    chips = sub.add_parser("chips", help="list, show and validate chip configs")
    csub = chips.add_subparsers(dest="action", required=True)
    csub.add_parser("list", help="the shipped chip configs")
    show = csub.add_parser("show", help="a chip config in full, with its identity hash")
    show.add_argument("name", help="shipped chip name or path to a TOML file")
    show.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. cores.count=16")
    val = csub.add_parser("validate", help="check a chip config file")
    val.add_argument("name", help="path to a TOML file (or a shipped name)")
    chips.set_defaults(func=cmd_chips)
