"""Errors at the edges: bad user input is a value with a clear message, never a traceback."""

from __future__ import annotations

from typing import Any


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
        super().__init__(f"{self.file}: field '{field}': got {value!r}; allowed: {allowed}")
