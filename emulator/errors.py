"""Errors of the emulator: every one names what was wrong and where."""

from __future__ import annotations

from typing import Any


class EmulatorError(Exception):
    """Base of the emulator's errors."""


class EncodeError(EmulatorError, ValueError):
    """A value does not fit its instruction field (or a layout does not fit 64 bits)."""

    def __init__(self, message: str, *, instruction: str | None = None, field: str | None = None,
                 value: Any = None, width: int | None = None):
        super().__init__(message)
        self.instruction, self.field, self.value, self.width = instruction, field, value, width


class ProgramError(EmulatorError, ValueError):
    """The program as a whole is malformed (too many cores, unmatched barriers, bad regions)."""


class ExecutionError(EmulatorError):
    """An instruction cannot execute: names the core, the instruction index and its operands."""

    def __init__(self, core: int, pc: int, instr: Any, message: str):
        what = instr.describe() if hasattr(instr, "describe") else repr(instr)
        super().__init__(f"core {core}, instruction #{pc} {what}: {message}")
        self.core, self.pc, self.instr, self.reason = core, pc, instr, message
