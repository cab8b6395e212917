"""Latency formulas as data: small arithmetic expressions checked once, evaluated fast.

A chip config states each Ball's latency as text (``"M*N*K/16 + M*N"``) so that every figure
stays a config field. The text is parsed once, only arithmetic over named variables is
allowed, and the compiled expression works on Python numbers and numpy arrays alike (the
analytical model evaluates whole arrays of candidates in one call).
"""

from __future__ import annotations

import ast
import functools
import math
from typing import Any, Iterable

import numpy as np

_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load,
    ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.USub, ast.UAdd,
    ast.Compare, ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq,
    ast.BoolOp, ast.And, ast.Or, ast.Call,
)
# Functions a formula may call; each works elementwise on numpy arrays.
FUNCTIONS = {"ceil": np.ceil, "floor": np.floor, "max": np.maximum, "min": np.minimum, "log2": np.log2}


# Bounds that keep every formula's evaluation small: `9**9**9**9` or a 10,000-digit constant
# would pass a syntax check and then hang whoever evaluates it (a sweep, the emulator).
MAX_TEXT = 1000  # characters of a formula
MAX_EXPONENT = 64  # a `**` exponent is a number constant of at most this size
MAX_CONSTANT = 2 ** 63  # magnitude of a number constant


class FormulaError(ValueError):
    """The text is not an arithmetic expression over the allowed names."""


def _check_bounds(tree: ast.AST, text: str) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
            if abs(node.value) > MAX_CONSTANT or (isinstance(node.value, float) and not math.isfinite(node.value)):
                shown = repr(node.value)
                shown = shown if len(shown) <= 24 else f"{shown[:12]}…({len(shown)} digits)"
                raise FormulaError(f"constant {shown} is too large in {text[:80]!r} (at most 2**63 in size)")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = node.right
            if isinstance(exponent, ast.UnaryOp) and isinstance(exponent.op, (ast.USub, ast.UAdd)):
                exponent = exponent.operand
            if not (isinstance(exponent, ast.Constant) and isinstance(exponent.value, (int, float))
                    and abs(exponent.value) <= MAX_EXPONENT):
                raise FormulaError(f"the exponent of {ast.unparse(node)!r} in {text!r} is not a number constant "
                                   f"of at most {MAX_EXPONENT} (x**c with |c| <= {MAX_EXPONENT})")
            if any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow) for n in ast.walk(node.left)):
                raise FormulaError(f"a power of a power {ast.unparse(node)!r} in {text!r}: one ** per "
                                   "term (write (x**a)**b as x**(a*b) with the product a constant)")


@functools.lru_cache(maxsize=1024)
def _check(text: str, names: frozenset, allow_strings: bool):
    """Parse and check once per distinct (text, names): configs repeat the same formulas."""
    if not isinstance(text, str):
        raise FormulaError(f"a formula is text, got {text!r}")
    if len(text) > MAX_TEXT:
        raise FormulaError(f"a formula of {len(text)} characters; allowed: at most {MAX_TEXT}")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"not an expression: {text!r} ({exc.msg})") from None
    except (RecursionError, MemoryError, ValueError) as exc:  # nested too deep; a NUL byte
        raise FormulaError(f"not an expression: {text[:60]!r}… ({type(exc).__name__})") from None
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise FormulaError(f"{type(node).__name__} is not allowed in {text!r}")
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS) or node.keywords:
                raise FormulaError(f"only calls to {sorted(FUNCTIONS)} are allowed in {text!r}")
        elif isinstance(node, ast.Name) and node.id not in names and node.id not in FUNCTIONS:
            raise FormulaError(f"unknown name {node.id!r} in {text!r}; allowed names: {sorted(names)}")
        elif isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)) and not (
                allow_strings and isinstance(node.value, str)):
            raise FormulaError(f"constant {node.value!r} is not a number in {text!r}")
    _check_bounds(tree, text)
    try:
        code = compile(tree, f"<formula {text}>", "eval")
    except (RecursionError, MemoryError) as exc:
        raise FormulaError(f"not an expression: {text[:60]!r}… ({type(exc).__name__})") from None
    return code, frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name)) - set(FUNCTIONS)


class Formula:
    """A checked arithmetic expression: ``Formula("M*N*K/16 + M*N", {"M", "N", "K"})``."""

    def __init__(self, text: str, names: Iterable[str], allow_strings: bool = False):
        self.text = text
        self.names = frozenset(names)
        self._code, self.used = _check(text, self.names, allow_strings)

    def __call__(self, **values: Any) -> Any:
        missing = self.used - values.keys()
        if missing:
            raise FormulaError(f"{self.text!r} needs values for {sorted(missing)}")
        return eval(self._code, {"__builtins__": {}, **FUNCTIONS}, values)  # noqa: S307 - AST checked above

    def cycles(self, **values: Any) -> Any:
        """Evaluate and round up to whole cycles (int, or an int64 array)."""
        result = self(**values)
        if isinstance(result, np.ndarray):
            return np.ceil(result).astype(np.int64)
        return int(math.ceil(result))

    def __repr__(self) -> str:
        return f"Formula({self.text!r})"
