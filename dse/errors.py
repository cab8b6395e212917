"""Errors at the edges: bad user input is a value with a clear message, never a traceback."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

# A value shown in an error message is cut to this many characters (a whole config is not
# a value the user can act on).
MAX_SHOWN = 200


def shown(value: Any, limit: int = MAX_SHOWN) -> str:
    """`repr(value)` on one line, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class InputError(Exception):
    """Bad user input (a chip config, an experiment spec, a recipe).

    The CLI prints the one-line message and exits with code 2; nothing is written.
    """

    exit_code = 2

    def __init__(self, file: Any, field: str, value: Any, allowed: str):
        self.file = str(file)
        self.field = field
        self.value = value
        self.allowed = allowed
        super().__init__(f"{self.file}: field '{field}': got {shown(value)}; allowed: {allowed}")


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
