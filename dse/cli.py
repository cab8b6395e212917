"""The one command-line entry point, `dse`, mirroring the Python API."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from .errors import InputError

DEFAULT_DB = "records.db"


def _parse_value(text: str):
    """`--set banks.count=20`: the value is read as TOML (20 is an int), else kept as text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _overrides(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise InputError("--set", key, pair, "KEY=VALUE, e.g. cores.count=16")
        out[key.strip()] = _parse_value(value.strip())
    return out


def cmd_chips(args) -> int:
    from .chips import chip_hash, list_chips, load_chip

    if args.action == "list":
        print(f"{'name':<10} {'cores':>5} {'banks':>5} {'rows':>6} {'row B':>5} {'SRAM/core':>10}  balls  hash")
        for name in list_chips():
            c = load_chip(name)
            print(f"{name:<10} {c.cores.count:>5} {c.banks.count:>5} {c.banks.rows:>6} {c.banks.row_bytes:>5} "
                  f"{c.private_sram_bytes:>10,}  {','.join(b.kind for b in c.balls)}  {chip_hash(c)[:12]}")
    elif args.action == "show":
        c = load_chip(args.name, _overrides(args.set), overrides_source="--set")
        print(json.dumps(c.model_dump(mode="json"), indent=2))
        print(f"hash: {chip_hash(c)}")
    else:  # validate
        c = load_chip(args.name)
        print(f"{args.name}: valid chip '{c.name}', hash {chip_hash(c)}")
    return 0


def cmd_sweep(args) -> int:
    from .runner import run_sweep

    result = run_sweep(args.spec, args.db, progress=not args.no_progress)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(result.counts.items()))
    print(f"experiment '{result.name}' (id {result.experiment_id}): {result.evaluated} evaluated, "
          f"{result.resumed} already recorded; {counts}")
    print(f"hypothesis: {result.status}" + (f" ({result.decision})" if result.decision else ""))
    print(f"store: {Path(args.db).resolve()}")
    return 0


def _open_store(db: str):
    from .records import Store

    if "://" not in db and not Path(db).exists():
        raise InputError(db, "--db", db, "an existing record store (run `dse sweep` first)")
    return Store(db)


def cmd_report(args) -> int:
    from .report import write_report

    with _open_store(args.db) as store:
        try:
            store.experiment(args.experiment)
        except KeyError:
            names = ", ".join(store.experiments()["name"]) or "(none yet)"
            raise InputError(args.db, "EXPERIMENT", args.experiment, f"one of {names}") from None
        report = write_report(store, args.experiment, args.out)
    print(report.path)
    return 0


def cmd_history(args) -> int:
    import pandas as pd

    with _open_store(args.db) as store:
        exps = store.experiments()
        if exps.empty:
            print("no experiments yet")
            return 0
        cols = [c for c in ("id", "name", "status", "n_candidates", "n_ok", "n_infeasible", "n_failed",
                            "latest_verdict", "hypothesis") if c in exps]
        view = exps[cols].copy()
        view["hypothesis"] = view["hypothesis"].str.replace(r"\s+", " ", regex=True).str.strip().str.slice(0, 70)
        with pd.option_context("display.width", 200, "display.max_colwidth", 80):
            print(view.to_string(index=False))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dse", description="Design-space exploration for Buckyball-family chips")
    sub = p.add_subparsers(dest="command", required=True)

    chips = sub.add_parser("chips", help="list, show and validate chip configs")
    csub = chips.add_subparsers(dest="action", required=True)
    csub.add_parser("list", help="the shipped chip configs")
    show = csub.add_parser("show", help="a chip config in full, with its identity hash")
    show.add_argument("name", help="shipped chip name or path to a TOML file")
    show.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. cores.count=16")
    val = csub.add_parser("validate", help="check a chip config file")
    val.add_argument("name", help="path to a TOML file (or a shipped name)")
    chips.set_defaults(func=cmd_chips)

    sweep = sub.add_parser("sweep", help="run an experiment spec into the record store")
    sweep.add_argument("spec", help="experiment spec TOML")
    sweep.add_argument("--db", default=DEFAULT_DB, help="record store path or URL (default records.db)")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.set_defaults(func=cmd_sweep)

    rep = sub.add_parser("report", help="write the HTML report of an experiment")
    rep.add_argument("experiment", help="experiment name or id")
    rep.add_argument("--db", default=DEFAULT_DB)
    rep.add_argument("--out", default="reports", help="output folder (default reports/)")
    rep.set_defaults(func=cmd_report)

    hist = sub.add_parser("history", help="experiments, hypothesis status and decisions")
    hist.add_argument("--db", default=DEFAULT_DB)
    hist.set_defaults(func=cmd_history)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"dse: error: {exc}", file=sys.stderr)
        return InputError.exit_code


if __name__ == "__main__":
    sys.exit(main())
