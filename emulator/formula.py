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


class FormulaError(ValueError):
    """The text is not an arithmetic expression over the allowed names."""


@functools.lru_cache(maxsize=1024)
def _check(text: str, names: frozenset, allow_strings: bool):
    """Parse and check once per distinct (text, names): configs repeat the same formulas."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"not an expression: {text!r} ({exc.msg})") from None
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
    code = compile(tree, f"<formula {text}>", "eval")
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
