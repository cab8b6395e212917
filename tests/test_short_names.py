"""The hot code's names say what they hold (issue 33): in the plan, the lowering, the units,
the analytical model and the emulator's timing model, few names bound are one or two letters.

Allowed short names are the conventions the code and HARDWARE.md share: a GEMM's sizes and
tiles (M, N, K, their padded and tiled counts, tm / tn / tk, the tile indices bi / mi / ni /
ki, the batch count nb), loop indices i / j / k, and the words op, pc, lo, hi, ok, at, to,
on, id. A name starting with ``_`` is a throwaway. Each folder's share of other short names
must stay at or below its bound (lowered as the code was renamed; the bounds are a ratchet).

    .venv/bin/python tests/test_short_names.py [TREE]   # each folder's share, of this tree or another
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CONVENTIONAL = frozenset("M N K Mp Np Kp Mt Nt Kt tm tn tk bi mi ni ki nb i j k pc op lo hi ok at to on id".split())

# folder (or file prefix) -> the most short names it may bind, as a share of its names
BOUNDS = {
    "dse/plan": 0.06,
    "dse/lower": 0.02,
    "dse/units": 0.04,
    "dse/analytical": 0.01,
    "emulator/timing": 0.01,
}


def bound_names(source: str) -> list[str]:
    """Every name `source` binds (assignment and loop targets, arguments), self and cls aside."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
        elif isinstance(node, ast.arg):
            names.append(node.arg)
    return [name for name in names if name not in ("self", "cls")]


def short(names: list[str]) -> list[str]:
    """The names of one or two letters that are no convention and no throwaway."""
    return [name for name in names if len(name) <= 2 and name not in CONVENTIONAL and not name.startswith("_")]


def files(where: str, root: Path = ROOT) -> list[Path]:
    path = root / where
    return sorted(path.rglob("*.py")) if path.is_dir() else sorted(path.parent.glob(path.name + "*.py"))


def test_the_checker_counts_short_names():
    names = bound_names("def f(a, count, M):\n    for x in range(count):\n        b = x\n    _t = tm = 1\n")
    assert sorted(names) == sorted(["a", "count", "M", "x", "b", "_t", "tm"])
    assert sorted(short(names)) == ["a", "b", "x"]


@pytest.mark.parametrize("where", sorted(BOUNDS))
def test_hot_code_names_say_what_they_hold(where):
    count, total = shares()[where]
    assert total, f"no code under {where}"
    found = {str(path.relative_to(ROOT)): sorted(set(short(bound_names(path.read_text())))) for path in files(where)}
    worst = sorted(((path, names) for path, names in found.items() if names), key=lambda item: -len(item[1]))
    assert count / total <= BOUNDS[where], (f"{where}: {count} of {total} names bound are one or two letters "
                                            f"({count / total:.1%} > {BOUNDS[where]:.0%}); say what they hold. "
                                            f"Most in: {worst[:3]}")

def shares(root: Path = ROOT) -> dict[str, tuple[int, int]]:
    """Per folder of `BOUNDS`: (short names, names bound) in the tree at `root`."""
    out = {}
    for where in sorted(BOUNDS):
        names = [name for path in files(where, root) for name in bound_names(path.read_text())]
        out[where] = (len(short(names)), len(names))
    return out


if __name__ == "__main__":
    for where, (count, total) in shares(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT).items():
        print(f"{where:<18} {count:>4} of {total:>5} names bound are short: {count / max(total, 1):6.1%} "
              f"(bound {BOUNDS[where]:.0%})")
