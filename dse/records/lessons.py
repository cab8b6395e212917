"""Lessons and reusable methods across experiments (`dse lesson TEXT --from EXP ...`).

A lesson is kept as note rows of kind "lesson" (no table of its own): one per experiment it
came from, written in one transaction with one text, author and time. This module groups
those rows back into lessons, once, for every view (`dse lessons`, `dse show EXP`, the
UI's experiment page). No SQLAlchemy or pandas: the light reads use it too."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

LESSON = "lesson"


def lessons(notes: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The lessons among `notes` (rows as `Store.notes()` gives them), oldest first: id
    (its first row's), text, author, created_at, experiment_ids and experiments (names),
    in the order they were given."""
    grouped: dict[tuple, dict[str, Any]] = {}
    for n in sorted((n for n in notes if n["kind"] == LESSON), key=lambda n: n["id"]):
        key = (n["text"], n["author"], n["created_at"])
        lesson = grouped.setdefault(key, {"id": n["id"], "text": n["text"], "author": n["author"],
                                          "created_at": n["created_at"], "experiment_ids": [], "experiments": []})
        lesson["experiment_ids"].append(n["experiment_id"])
        lesson["experiments"].append(n["experiment"])
    return list(grouped.values())


def sources_text(lesson: Mapping[str, Any]) -> str:
    """"from 1 'banks', 3 'tiles'": the experiments a lesson came from."""
    return "from " + ", ".join(f"{i} '{name}'" for i, name in zip(lesson["experiment_ids"], lesson["experiments"]))


def lessons_of(notes: Iterable[Mapping[str, Any]], experiment_id: int) -> list[dict[str, Any]]:
    """The lessons among `notes` (every experiment's) that came from experiment `experiment_id`,
    each with all the experiments it came from."""
    return [x for x in lessons(notes) if int(experiment_id) in x["experiment_ids"]]
