"""Errors at the edges: bad user input is a value with a clear message, never a traceback."""

from __future__ import annotations

import difflib
import tomllib
import typing
from pathlib import Path
from typing import Any, Iterable, Sequence

# A value shown in an error message is cut to this many characters (a whole config is not
# a value the user can act on).
MAX_SHOWN = 200


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """`repr(value)` on one line, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def close_matches(word: Any, choices: Iterable[Any], n: int = 3) -> list[str]:
    """The `choices` closest to a misspelt `word` (difflib's ratio, best first; none when
    nothing is close): the one "did you mean" of every error naming a key, a field, a
    chip, a recipe or an experiment."""
    word, choices = str(word), list(dict.fromkeys(str(c) for c in choices))
    found = difflib.get_close_matches(word, choices, n=n, cutoff=0.6)
    if not found:
        return []
    # Only those about as close as the closest: "bank.rows" -> "banks.rows", not also "banks.row_bytes".
    ratio = {c: difflib.SequenceMatcher(None, word, c).ratio() for c in found}
    return [c for c in found if ratio[c] >= ratio[found[0]] - 0.05]


def did_you_mean(suggestions: Sequence[str]) -> str:
    """"did you mean 'hypothesis'?" (or "'a' or 'b'"); "" for no suggestion."""
    return "did you mean " + " or ".join(repr(s) for s in suggestions) + "?" if suggestions else ""


class InputError(Exception):
    """Bad user input (a chip config, an experiment spec, a recipe).

    The CLI prints the one-line message and exits with code 2; nothing is written.
    `suggestions`: what the value was likely meant to be (`close_matches`), said before
    what is allowed.
    """

    exit_code = 2

    def __init__(self, file: Any, field: str, value: Any, allowed: str, suggestions: Sequence[str] = ()):
        self.file = str(file)
        self.field = field
        self.value = value
        self.allowed = allowed
        self.suggestions = list(suggestions)
        hint = f"; {did_you_mean(self.suggestions)}" if self.suggestions else ""
        super().__init__(f"{self.file}: field '{field}': got {shown(value)}{hint}; allowed: {allowed}")


def suggesting(file: Any, field: str, value: Any, allowed: str, choices: Iterable[Any]) -> InputError:
    """An `InputError` for `value`, with the `choices` close to it as its suggestions."""
    return InputError(file, field, value, allowed, close_matches(value, choices))


def dotted_paths(data: dict, prefix: str = "") -> list[str]:
    """The dotted path of every value in nested tables ({"banks": {"rows": 1}} -> ["banks.rows"]):
    the choices a misspelt dotted target is matched against."""
    out = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        out.extend(dotted_paths(value, path + ".") if isinstance(value, dict) and value else [path])
    return out


class Stopped(Exception):
    """A command stopped by something outside its input (its sweep taken over by another
    process, a database gone for good): the CLI prints the one-line message and exits with
    `exit_code`; what was recorded before stays, and a rerun resumes."""

    exit_code = 75  # EX_TEMPFAIL: a temporary failure, try again later


def read_text(path: str | Path, what: str) -> str:
    """The UTF-8 text of a user's file; an `InputError` naming it when it cannot be read
    (missing, a directory, no permission, not UTF-8)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise InputError(path, "(file)", str(path), f"{what}, not a directory") from None
    except FileNotFoundError:
        raise InputError(path, "(file)", str(path), f"an existing {what}") from None
    except PermissionError:
        raise InputError(path, "(file)", str(path), f"a readable {what} (permission denied)") from None
    except OSError as error:
        raise InputError(path, "(file)", str(path), f"a readable {what} ({error.strerror or error})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError(path, "(encoding)", data[max(error.start - 8, 0): error.start + 8],
                         f"{what} in UTF-8 text (byte {error.start} is not UTF-8)") from None


def read_toml(path: str | Path, what: str) -> tuple[str, dict]:
    """The text and parsed data of a user's TOML file, or an `InputError` naming it."""
    text = read_text(path, what)
    if "\x00" in text:
        raise InputError(path, "(encoding)", "NUL byte", f"{what} in text, not a binary file")
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, "(syntax)", str(exc), "valid TOML") from None


def model_keys(model: Any, loc: Sequence[Any]) -> list[str]:
    """The field names of the (pydantic) model that `loc` points into from `model` (list
    indices skipped); [] where `loc` leads out of the models."""
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(model, "model_fields", {})
        if str(part) not in fields:
            return []
        model = next((a for a in _flattened_types(fields[str(part)].annotation) if hasattr(a, "model_fields")), None)
        if model is None:
            return []
    return sorted(getattr(model, "model_fields", {}))


def _flattened_types(annotation: Any) -> list[Any]:
    args = typing.get_args(annotation)
    return [annotation] if not args else [x for a in args for x in _flattened_types(a)]


def dotted_loc(loc: Sequence[Any]) -> str:
    """('space', 1, 'target') -> 'space[1].target'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
