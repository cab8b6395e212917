"""`dse sweep SPEC`."""

from __future__ import annotations

from pathlib import Path

from .common import add_db_argument


def cmd_sweep(args) -> int:
    from ..runner import run_sweep

    result = run_sweep(args.spec, args.db, progress=not args.no_progress)
    counts = ", ".join(f"{v} {k}" for k, v in sorted(result.counts.items()))
    print(f"experiment '{result.name}' (id {result.experiment_id}): {result.evaluated} evaluated, "
          f"{result.resumed} already recorded; {counts}")
    print(f"hypothesis: {result.status}" + (f" ({result.decision})" if result.decision else ""))
    print(f"store: {Path(args.db).resolve() if '://' not in args.db else args.db}")
    return 0


def register(sub) -> None:
    sweep = sub.add_parser("sweep", help="run an experiment spec into the record store")
    sweep.add_argument("spec", help="experiment spec TOML")
    add_db_argument(sweep)
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.set_defaults(func=cmd_sweep)
