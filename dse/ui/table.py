"""The candidate table's columns: which metric columns a page shows (the `cols` URL
parameter, else the metrics the objectives and the acceptance name), so that "changes" and
"reason" stay in view; the column chooser offers the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..runner.acceptance import criteria_of
from ..runner.criteria import NAMES
from .queries import BadQuery


def default_columns(names: Sequence[str], objectives: Sequence[Mapping], exp: Mapping) -> list[str]:
    """The analytical metric columns shown when the URL names none: the objectives' and
    those the acceptance clauses read (analytical figures), in the table's order."""
    wanted = {o["metric"] for o in objectives}
    criteria, _error = criteria_of(exp)
    for clause in criteria.clauses:
        wanted |= {NAMES[v][2] for v in clause.formula.used if NAMES[v][1] == "analytical"}
    return [n for n in names if n in wanted] or list(names[:2])


def shown_columns(params: Mapping[str, str], names: Sequence[str], objectives: Sequence[Mapping],
                  exp: Mapping) -> list[str]:
    """The metric columns to show: `cols` (comma-separated metric names; "-" for none) when
    given, else `default_columns`. An unknown name is a bad query."""
    text = params.get("cols", "").strip()
    if not text:
        return default_columns(names, objectives, exp)
    if text == "-":
        return []
    chosen = [c.strip() for c in text.split(",") if c.strip()]
    for c in chosen:
        if c not in names:
            raise BadQuery("cols", c, "metric names of this experiment's table, comma-separated: " + ", ".join(names))
    return [n for n in names if n in chosen]
