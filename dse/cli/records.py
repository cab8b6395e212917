"""Record-store commands: `dse history`."""

from __future__ import annotations

from .common import add_db_argument, open_store


def cmd_history(args) -> int:
    import pandas as pd

    with open_store(args.db) as store:
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


def register(sub) -> None:
    hist = sub.add_parser("history", help="experiments, hypothesis status and decisions")
    add_db_argument(hist)
    hist.set_defaults(func=cmd_history)
