"""`dse report EXPERIMENT` and `dse report --history`."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError, suggesting
from .common import add_db_argument, evidence_verdict, open_store


def _out_dir(out: str) -> Path:
    """The output folder, made if need be: an existing file, or a place no folder can be
    made (under /dev/null, no permission), is bad input."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise InputError(path, "--out", out, "an output folder (this is an existing file)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(path, "--out", out, f"a folder that can be made ({error.strerror or error})") from None
    return path


def _written(write, *args, out: str, **kwargs):
    try:
        return write(*args, **kwargs)
    except OSError as error:
        where = error.filename or out
        raise InputError(where, "--out", out, f"a writable output folder ({error.strerror or error})") from None


def cmd_report(args) -> int:
    from ..report import write_history, write_report

    with open_store(args.db) as store:
        if args.history:
            print(_written(write_history, store, _out_dir(args.out), out=args.out).path)
            return 0
        if not args.experiment:
            raise InputError("dse report", "EXPERIMENT", None, "an experiment name or id, or --history")
        try:
            store.experiment(args.experiment)
        except KeyError:
            names = list(store.experiments()["name"])
            raise suggesting(args.db, "EXPERIMENT", args.experiment, f"one of {', '.join(names) or '(none yet)'}",
                             names) from None
        from ..runner.metrics import METRICS

        for flag, metric in (("--x", args.x), ("--y", args.y)):
            if metric is not None and metric not in METRICS:
                raise suggesting("dse report", flag, metric, "one of " + ", ".join(METRICS), METRICS)
        report = _written(write_report, store, args.experiment, _out_dir(args.out), x=args.x, y=args.y, out=args.out)
    print(report.path)
    for line in report.evidence.lines():  # written, and named in the report too
        print(f"  ! {line}")
    return evidence_verdict(report.evidence)


def register(sub) -> None:
    rep = sub.add_parser("report", help="write the HTML (and Markdown) report of an experiment, or the history")
    rep.add_argument("experiment", nargs="?", help="experiment name or id")
    rep.add_argument("--history", action="store_true", help="the timeline of experiments and decisions")
    rep.add_argument("--x", default=None, help="Pareto plot x metric (default: the second objective)")
    rep.add_argument("--y", default=None, help="Pareto plot y metric (default: the first objective)")
    add_db_argument(rep)
    rep.add_argument("--out", default="reports", help="output folder (default reports/)")
    rep.set_defaults(func=cmd_report)
