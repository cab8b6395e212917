"""`dse report EXPERIMENT`."""

from __future__ import annotations

from ..errors import InputError
from .common import add_db_argument, open_store


def cmd_report(args) -> int:
    from ..report import write_report

    with open_store(args.db) as store:
        try:
            store.experiment(args.experiment)
        except KeyError:
            names = ", ".join(store.experiments()["name"]) or "(none yet)"
            raise InputError(args.db, "EXPERIMENT", args.experiment, f"one of {names}") from None
        report = write_report(store, args.experiment, args.out)
    print(report.path)
    return 0


def register(sub) -> None:
    rep = sub.add_parser("report", help="write the HTML report of an experiment")
    rep.add_argument("experiment", help="experiment name or id")
    add_db_argument(rep)
    rep.add_argument("--out", default="reports", help="output folder (default reports/)")
    rep.set_defaults(func=cmd_report)
