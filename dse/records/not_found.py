"""What a name or id that matches nothing raises (`RecordNotFound`), with a message saying
what the store has, found by SQL both databases speak (`sql_reads.Run`): the same words
whichever reader was asked, the Store or a light one (`dse.records.contract`)."""

from __future__ import annotations

import operator
from typing import Any

from dse.errors import InputError, close_matches

# The tables a name or id is looked up in, by what the message calls them.
TABLES = {"experiment": "experiment", "candidate": "candidate", "run": "run", "decision": "decision",
          "artifact": "artifact"}
NAMES_LISTED = 12  # experiment names spelt out in the message, at most


class RecordNotFound(InputError, KeyError):
    """No experiment, candidate or run of that name or id: bad user input (exit code 2),
    and a KeyError for Python callers."""

    __str__ = Exception.__str__  # not KeyError's repr() of the message


def as_id(value: Any) -> int:
    """An id as an int; a non-integer (a typo on a command line) matches no row."""
    try:
        return operator.index(value)
    except TypeError:
        text = str(value).strip()
        return int(text) if text.isdigit() else -1


def not_found(run, where: str, what: str, value: Any, experiment_id: int | None = None) -> RecordNotFound:
    """The error for a `what` (a key of TABLES) named `value` that the store at `where` (its
    URL as shown) lacks, saying what it has; a candidate `experiment_id` lacks, saying what
    that experiment has."""
    if what == "experiment":
        names = [row[0] for row in run("SELECT name FROM experiment ORDER BY id", {})[1]]
        if not names:
            allowed = "an experiment of this store, which has none yet"
        elif len(names) <= NAMES_LISTED:
            allowed = "an experiment name or id: " + ", ".join(names)
        else:
            allowed = f"one of this store's {len(names)} experiments (`dse history` lists them)"
        return RecordNotFound(where, "experiment", value, allowed, close_matches(value, names))
    table = TABLES[what]
    sql, params, scope = f"SELECT min(id), max(id), count(id) FROM {table}", {}, "this store"
    if what == "candidate" and experiment_id is not None:
        sql += " WHERE experiment_id = :experiment_id"
        params = {"experiment_id": experiment_id}
        (name,), = run("SELECT name FROM experiment WHERE id = :id", {"id": experiment_id})[1] or [(None,)]
        scope = f"experiment {name!r}"
    (low, high, count), = run(sql, params)[1]
    ids = f", ids {low} to {high}" if count else ""
    return RecordNotFound(where, what, value, f"a {what} id of {scope} ({count} {what}s{ids})")
