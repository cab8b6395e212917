"""The one parser of the UI's URL parameters (path and query) and form numbers.

A number in a URL is ASCII digits only: `str.isdigit` and `int()` also take superscript,
fullwidth and Arabic-Indic digits (and `int()` thousands of them, slowly), and an id past
int64 reaches the database as an OverflowError. Here a record id is 1..2**63-1 (the stores'
INTEGER keys), a page number 1..MAX_PAGE, a float a plain ASCII decimal; text carries no
control characters and is bounded. Anything else is a `BadParameter`: HTTP 400 with one
line naming the parameter, the value (cut short) and what is allowed.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import shown
from .queries import BadQuery

MAX_ID = 2**63 - 1  # SQLite's and PostgreSQL's BIGINT keys
MAX_PAGE = 10**9  # far past any store's last page; small enough to multiply by a page size
MAX_TEXT = 1000  # characters of one text parameter
MAX_IDS = 500  # ids in one list parameter (compare, a live page's watch list)
ID_RANGE = f"1 to {MAX_ID}"
# What an experiment may be called (the spec's `experiment.name` pattern).
NAME = re.compile(r"[A-Za-z0-9_.-]{1,200}")
DIGITS = re.compile(r"[0-9]{1,30}")  # ASCII only: re's [0-9] is not \d
DECIMAL = re.compile(r"[+-]?(?:[0-9]{1,30}(?:\.[0-9]{0,30})?|\.[0-9]{1,30})(?:[eE][+-]?[0-9]{1,4})?")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BadParameter(BadQuery):
    """A URL (or form) parameter that is not what its place takes: one line for HTTP 400."""

    def __init__(self, where: str, name: str, value: Any, allowed: str):
        ValueError.__init__(self, f"{where} parameter {name}={shown(value, 80)}: allowed {allowed}")
        self.parameter, self.value, self.allowed = name, value, allowed


def whole(text: str, name: str, low: int, high: int, where: str = "query", what: str = "a whole number") -> int:
    """`text` as an int in low..high, written in ASCII digits."""
    if not DIGITS.fullmatch(text):
        raise BadParameter(where, name, text, f"{what} from {low} to {high}, in ASCII digits")
    value = int(text)
    if not low <= value <= high:
        raise BadParameter(where, name, text, f"{what} from {low} to {high}")
    return value


def record_id(text: str, name: str = "ident", what: str = "record", where: str = "path") -> int:
    """A record's id (a candidate's, a run's, an artifact's)."""
    article = "an" if what[:1] in ("a", "e", "i", "o", "u") else "a"
    return whole(text, name, 1, MAX_ID, where, f"{article} {what} id")


def experiment_ref(text: str) -> int | str:
    """An experiment's id (ASCII digits) or its name."""
    if DIGITS.fullmatch(text) or text.isdigit():  # (isdigit: ²٣４, refused by `whole`)
        return record_id(text, "ref", "experiment")
    if not NAME.fullmatch(text):
        raise BadParameter("path", "ref", text, f"an experiment id ({ID_RANGE}) or name (letters, digits, _ . -)")
    return text


def form_text(form, name: str, limit: int, lines: bool = False) -> str:
    """A form's text field, stripped; one line unless `lines` (then tabs and line breaks
    may be in it, no other control character)."""
    value = str(form.get(name, "")).strip()
    check_text(value.replace("\n", " ").replace("\r", " ").replace("\t", " ") if lines else value, name, limit, "form")
    return value


def check_text(value: str, name: str, limit: int = MAX_TEXT, where: str = "query") -> None:
    if len(value) > limit:
        raise BadParameter(where, name, value, f"at most {limit} characters")
    if CONTROL.search(value):
        raise BadParameter(where, name, value, "text without control characters")


def number(params, name: str, default: int, low: int = 1, high: int = MAX_PAGE) -> int:
    """An optional whole-number query parameter (a page, a page size, an id to start after)."""
    value = params.get(name, "").strip()
    return default if not value else whole(value, name, low, high)


def decimal(params, name: str) -> float | None:
    """An optional finite decimal query parameter (a range filter's bound)."""
    value = params.get(name, "").strip()
    if not value:
        return None
    if not DECIMAL.fullmatch(value):
        raise BadParameter("query", name, value, "a number in ASCII digits (like 12, -0.5 or 3e6)")
    result = float(value)
    if not math.isfinite(result):
        raise BadParameter("query", name, value, "a finite number")
    return result


def id_list(values: list[str], name: str, what: str = "candidate", prefix: str = "", limit: int = MAX_IDS) -> list[int]:
    """Ids given as repeated parameters and/or comma- or space-separated (`c=1,2&c=c3`),
    each optionally after `prefix` (a candidate's "c"); in order, without repeats."""
    items = [item for value in values for item in value.replace(",", " ").split()]
    if len(items) > limit:
        raise BadParameter("query", name, ",".join(items), f"at most {limit} {what} ids")
    ids: list[int] = []
    for item in items:
        digits = item[1:] if prefix and item[:1] in (prefix.lower(), prefix.upper()) else item
        if not DIGITS.fullmatch(digits) or not 1 <= int(digits) <= MAX_ID:
            raise BadParameter("query", name, item, f"{what} ids ({ID_RANGE}, ASCII digits)")
        if int(digits) not in ids:
            ids.append(int(digits))
    return ids


def check_request(path: str, query_params) -> None:
    """What holds for every parameter of every route, before routing: a bounded path and
    bounded text without control characters. (Each route then reads its own with the
    parsers above.)"""
    check_text(path, "(path)", where="path")
    if len(query_params) > 100:
        raise BadParameter("query", "(count)", len(query_params), "at most 100 query parameters")
    for name, value in query_params.multi_items():
        check_text(name, "(name)")
        check_text(value, name)
