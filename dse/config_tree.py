"""A chip config or mapping as a readable tree: nested, indented key/value rows.

One formatter for every view: `dse show c<ID>` prints `tree_text`, the UI's candidate and
run pages render `tree_rows` (a row's depth is its indent). A list of plain values stays on
one line ("[1, 2, 4]"); a list of tables gets a row per item ("[0]", "[1]", ...) with the
item's keys below it. Strings print bare unless they would read as another value (a
number, true, "", text with edge spaces): then quoted, so 16 and "16" stay apart.

Standard library only: `dse show` imports it without pandas.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TreeRow:
    depth: int  # 0 for the top level's keys
    key: str  # "banks", "[0]" for a list's item
    value: str | None  # the leaf's text; None for a branch (its rows follow, one deeper)
    path: str  # "banks.rows", "balls[0].kind": the field's dotted path, as a diff names it


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        try:
            json.loads(value)
            looks_like_other = True  # "16", "true", "null", "[1]" ...
        except ValueError:
            looks_like_other = False
        if looks_like_other or not value or value != value.strip() or "\n" in value:
            return json.dumps(value)
        return value
    return json.dumps(value, default=str)


def _is_leaf(value: Any) -> bool:
    if isinstance(value, Mapping):
        return not value
    if isinstance(value, (list, tuple)):
        return not any(isinstance(v, (Mapping, list, tuple)) for v in value)
    return True


def _leaf(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    return _scalar(value)


def _items(value: Any) -> Iterable[tuple[str, Any, str]]:
    """(key as shown, child, path part) of a branch."""
    if isinstance(value, Mapping):
        for key, child in value.items():
            yield str(key), child, f".{key}"
    else:
        for i, child in enumerate(value):
            yield f"[{i}]", child, f"[{i}]"


def tree_rows(tree: Any, depth: int = 0, path: str = "") -> list[TreeRow]:
    """The rows of a nested value (a dict at the top), depth first, in its own key order."""
    if _is_leaf(tree):
        return [TreeRow(depth, path or "(value)", _leaf(tree), path)]
    rows: list[TreeRow] = []
    for key, child, part in _items(tree):
        child_path = (path + part).lstrip(".")
        if _is_leaf(child):
            rows.append(TreeRow(depth, key, _leaf(child), child_path))
        else:
            rows.append(TreeRow(depth, key, None, child_path))
            rows.extend(tree_rows(child, depth + 1, child_path))
    return rows


def tree_text(tree: Any, indent: str = "  ", depth: int = 0) -> str:
    """The tree as indented lines, "key: value" and "key:" above a branch's rows."""
    lines = []
    for row in tree_rows(tree):
        pad = indent * (depth + row.depth)
        lines.append(f"{pad}{row.key}:" if row.value is None else f"{pad}{row.key}: {row.value}")
    return "\n".join(lines)


def changed_paths(diff: Mapping[str, Any], section: str) -> set[str]:
    """The paths of a candidate's diff ({"config.banks.rows": [a, b]}) in one section
    ("config" or "mapping"), as `tree_rows` names them."""
    prefix = section + "."
    return {key[len(prefix):] for key in diff if key.startswith(prefix)}


def is_changed(row: TreeRow, changed: set[str]) -> bool:
    """Whether a row is a changed field, or inside one (a list that differs, as a whole)."""
    return any(row.path == c or row.path.startswith(c + "[") or row.path.startswith(c + ".") for c in changed)
