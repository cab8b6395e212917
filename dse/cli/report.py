"""`dse report EXPERIMENT` and `dse report --history`."""

from __future__ import annotations

from ..errors import InputError
from .common import add_db_argument, open_store


def cmd_report(args) -> int:
    from ..report import write_history, write_report

    with open_store(args.db) as store:
        if args.history:
            print(write_history(store, args.out).path)
            return 0
        if not args.experiment:
            raise InputError("dse report", "EXPERIMENT", None, "an experiment name or id, or --history")
        try:
            store.experiment(args.experiment)
        except KeyError:
            names = ", ".join(store.experiments()["name"]) or "(none yet)"
            raise InputError(args.db, "EXPERIMENT", args.experiment, f"one of {names}") from None
        from ..runner.spec import METRICS

        for flag, metric in (("--x", args.x), ("--y", args.y)):
            if metric is not None and metric not in METRICS:
                raise InputError("dse report", flag, metric, "one of " + ", ".join(METRICS))
        report = write_report(store, args.experiment, args.out, x=args.x, y=args.y)
    print(report.path)
    return 0


def register(sub) -> None:
    rep = sub.add_parser("report", help="write the HTML (and Markdown) report of an experiment, or the history")
    rep.add_argument("experiment", nargs="?", help="experiment name or id")
    rep.add_argument("--history", action="store_true", help="the timeline of experiments and decisions")
    rep.add_argument("--x", default=None, help="Pareto plot x metric (default: the second objective)")
    rep.add_argument("--y", default=None, help="Pareto plot y metric (default: the first objective)")
    add_db_argument(rep)
    rep.add_argument("--out", default="reports", help="output folder (default reports/)")
    rep.set_defaults(func=cmd_report)
