"""`dse sweep SPEC`."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import InputError
from ..records.outcomes import spelled_counts
from .common import add_db_argument


def cmd_sweep(args) -> int:
    from ..runner import run_sweep

    if args.workers < 1:
        raise InputError("--workers", "--workers", args.workers, "a positive number of processes")
    if not 0 < args.connect_timeout <= 3600:
        raise InputError("--connect-timeout", "--connect-timeout", args.connect_timeout,
                         "seconds to wait for the cluster's scheduler, more than 0 and at most 3600")
    try:
        result = run_sweep(args.spec, args.db, progress=not args.no_progress, workers=args.workers,
                           cluster=args.cluster, connect_timeout=args.connect_timeout,
                           yes_large=args.yes_large, reuse=not args.no_reuse)
    except KeyboardInterrupt as stop:
        # Every batch evaluated before the interrupt is recorded; the one it cut is not, and
        # emulator runs in flight were marked crashed.
        from . import EXIT_INTERRUPT, INTERRUPTED

        recorded = getattr(stop, "recorded", None)
        print(INTERRUPTED if recorded is None else
              f"{INTERRUPTED}: {recorded[0]} candidates recorded by this run, {recorded[1]} in all", file=sys.stderr)
        return EXIT_INTERRUPT
    print(f"experiment '{result.name}' (id {result.experiment_id}): {result.evaluated} evaluated, "
          f"{result.resumed} already recorded; candidates: {spelled_counts(result.outcomes)}")
    if result.reused:
        print(f"reused: {result.reused} run(s) link to an earlier experiment's evidence of the same candidate "
              "(dse show CANDIDATE names it; --no-reuse evaluates afresh)")
    if result.reasons:  # each reason once, with how many candidates it stopped
        from ..runner.reasons import reason_lines

        print("not evaluated to the end:")
        for line in reason_lines(result.reasons):
            print(f"  {line}")
    if result.stopped_early:
        print(f"stopped early: {result.stopped_early}")
    if result.proposed:
        print(f"proposed verdict: {result.proposed} ({result.decision})")
    print(f"hypothesis: {result.status}" + (
        f" (people decide: dse decide {result.name} --accept CANDIDATE --why REASON)"
        if result.status == "testing" and result.proposed else ""))
    print(f"store: {Path(args.db).resolve() if '://' not in args.db else args.db}")
    return 0


def cmd_propose(args) -> int:
    from ..runner.propose import propose

    ident, status, new = propose(args.spec, args.db)
    with_spec = "recorded" if new else "already recorded (this spec)"
    print(f"experiment {ident} {with_spec}: hypothesis {status}" + (
        ", not run yet: `dse sweep` of this spec runs it" if status == "proposed" else ""))
    print(f"store: {Path(args.db).resolve() if '://' not in args.db else args.db}")
    return 0


def register(sub) -> None:
    sweep = sub.add_parser("sweep", help="run an experiment spec into the record store")
    sweep.add_argument("spec", help="experiment spec TOML")
    add_db_argument(sweep)
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.add_argument("--workers", type=int, default=1, help="local worker processes (default 1: in this process)")
    sweep.add_argument("--cluster", default=None, metavar="ADDRESS",
                       help="Dask scheduler address (default: $DASK_SCHEDULER_ADDRESS if set)")
    sweep.add_argument("--connect-timeout", type=float, default=5.0, metavar="SECONDS",
                       help="how long to wait for the cluster's scheduler to answer (default 5)")
    sweep.add_argument("--yes-large", action="store_true",
                       help="run a sweep of more candidates than [search] max_candidates (default 100000)")
    sweep.add_argument("--no-reuse", action="store_true",
                       help="evaluate every candidate, even one an earlier experiment on the same workload evaluated "
                            "(default: its run links to that evidence)")
    sweep.set_defaults(func=cmd_sweep)
    prop = sub.add_parser("propose", help="record an experiment's hypothesis untested (no stage runs); "
                                          "a later `dse sweep` of the spec runs it")
    prop.add_argument("spec", help="experiment spec TOML")
    add_db_argument(prop)
    prop.set_defaults(func=cmd_propose)
