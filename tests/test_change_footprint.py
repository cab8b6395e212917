"""How many files a change touches ("To change X" in docs/architecture.md), counted from the
code: for a sample of each kind of change, the source files (dse/, emulator/; not tests or
docs) whose code names it. The docs' table quotes the same counts and lists the same files,
checked here so that neither drifts.

What "names it" means, per kind of name (docstrings and comments never count):

* an op kind: a string literal equal to it, or its aten overload (``"sin.default"``);
* a Ball: its kind or its instruction (the `emulator.isa` class whose ``ball`` is that
  kind), as a string literal or an identifier;
* a unit of the plan: a string in a unit's place - ``OpPlan(op, "scale", ...)``,
  ``Unit("scale", ...)``, ``unit="scale"``, ``plan.unit == "scale"`` / ``in (...)``, or an
  entry of a module-level ``*UNITS`` table.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("dse", "emulator")
DOCS = REPO / "docs" / "architecture.md"


@dataclass
class Names:
    """What one source file's code names."""

    strings: set[str] = field(default_factory=set)
    identifiers: set[str] = field(default_factory=set)
    units: set[str] = field(default_factory=set)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings or bare string statements."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _strings(node: ast.AST | None) -> set[str]:
    """The string constants `node` is, or holds as a tuple / list / set / dict's keys."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    if isinstance(node, ast.Dict):
        return {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return set()


def _callee(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _is_unit(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Attribute) and node.attr == "unit")
            or (isinstance(node, ast.Name) and node.id == "unit"))


def python_names(text: str) -> Names:
    tree = ast.parse(text)
    docs = _docstrings(tree)
    out = Names()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.strings.add(node.value)
        elif isinstance(node, ast.Name):
            out.identifiers.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.identifiers.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.identifiers.add(node.name)
        elif isinstance(node, ast.alias):
            out.identifiers.update(n.split(".")[-1] for n in (node.name, node.asname) if n)
        if isinstance(node, ast.Call):
            if _callee(node) == "OpPlan" and len(node.args) > 1:
                out.units |= _strings(node.args[1])
            if _callee(node) == "Unit" and node.args:
                out.units |= _strings(node.args[0])
            out.units.update(*(_strings(k.value) for k in node.keywords if k.arg == "unit"))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_unit(s) for s in sides):
                out.units.update(*(_strings(s) for s in sides))
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id.endswith("UNITS") for t in targets):
                out.units |= _strings(node.value)
                if isinstance(node.value, ast.Tuple):  # (*OTHER_UNITS, "scale", ...)
                    out.units.update(*(_strings(e) for e in node.value.elts))
    return out


_LITERAL = re.compile(r'"([^"\\\n]*)"|\'([^\'\\\n]*)\'')
_IDENTIFIER = re.compile(r"\b[A-Za-z_]\w*\b")


def text_names(text: str) -> Names:
    """A Cython or C++ file's string literals and identifiers (by pattern: no parser)."""
    return Names({a or b for a, b in _LITERAL.findall(text)}, set(_IDENTIFIER.findall(text)))


@cache
def source_names(root: Path = REPO) -> dict[str, Names]:
    """Per source file under dse/ and emulator/ (its path from `root`), what its code names."""
    out = {}
    for top in SOURCE_DIRS:
        for path in sorted((root / top).rglob("*")):
            if path.suffix == ".py":
                out[path.relative_to(root).as_posix()] = python_names(path.read_text())
            elif path.suffix in (".pyx", ".pxd", ".h"):
                out[path.relative_to(root).as_posix()] = text_names(path.read_text())
    return out


def kind_files(kind: str, root: Path = REPO) -> set[str]:
    """The files whose code names op kind `kind` (or its aten overloads)."""
    return {f for f, n in source_names(root).items()
            if kind in n.strings or any(s.startswith(kind + ".") for s in n.strings)}


def ball_instructions(ball: str) -> set[str]:
    """The names of the instructions that run on Ball `ball`."""
    from emulator.isa import ACCELERATOR_CLASSES

    return {cls.__name__ for cls in ACCELERATOR_CLASSES if getattr(cls, "ball", None) == ball}


def ball_files(ball: str, root: Path = REPO) -> set[str]:
    """The files whose code names Ball `ball`: its kind or its instructions, as a string or
    an identifier (its arithmetic ``fp2int``, a handler ``_fp2int``, an export "Fp2Int")."""
    names = {ball} | ball_instructions(ball)
    return {f for f, n in source_names(root).items()
            if names & (n.strings | {i.lstrip("_") for i in n.identifiers})}


def unit_files(unit: str, root: Path = REPO) -> set[str]:
    """The files whose code names unit `unit` of the plan in a unit's place."""
    return {f for f, n in source_names(root).items() if unit in n.units}


# Each row of the docs' table this test measures: its first cell, and the files its sample
# change names. Rows the code cannot count (a DMA model, a decision rule) are the docs' word.
def _streamed(root: Path = REPO) -> set[str]:
    # the Fp2Int / Int2Fp Balls and the unit that streams the scale ops through them
    return ball_files("fp2int", root) | ball_files("int2fp", root) | unit_files("scale", root)


def _emulated(root: Path = REPO) -> set[str]:
    return {f for f in ball_files("fp2int", root) | ball_files("int2fp", root) if f.startswith("emulator/")}


MEASURED = {
    "a new Ball, emulated": _emulated,
    "... and an op streamed through it": _streamed,
    "a new op on the core, the aten op of its own name on one tensor": lambda root=REPO: kind_files("sin", root),
    "a new op on the core with attributes of its own": lambda root=REPO: kind_files("cumsum", root),
    "a new GEMM form (a unit on the matrix Ball)": lambda root=REPO: unit_files("grouped", root),
    "another rank of convolution on the matrix Ball": lambda root=REPO: kind_files("conv3d", root),
}
# What issue #33 aimed at (the rows it named), and what the code reaches.
BOUNDS = {
    "... and an op streamed through it": 7,
    "a new op on the core, the aten op of its own name on one tensor": 2,
    "a new op on the core with attributes of its own": 2,
    "a new GEMM form (a unit on the matrix Ball)": 3,
}


def docs_rows() -> dict[str, tuple[str, str]]:
    """The "To change X" table: first cell -> (files cell, count cell)."""
    text = DOCS.read_text()
    table = text[text.index("## To change X"):]
    table = table[:table.index("\n## ", 3)]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and not set(cells[2]) <= {"-"}:
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def _listed(cell: str) -> set[str]:
    """The source files a docs cell counts: backticked paths under dse/ or emulator/, before
    any "not counted:" note."""
    return set(re.findall(r"`((?:dse|emulator)/[\w/]+\.(?:py|pyx|h))", cell.split("not counted:")[0]))


def test_the_names_found_are_the_ones_written():
    """The scanner on a small hand-written source: strings, instruction names and units in
    their places, docstrings and comments left out."""
    names = python_names('''
"""A docstring naming "sin" and Fp2Int."""
# a comment naming cumsum
KINDS = ("sin", "neg")
TABLE = {"cumsum.default": handle}
MATRIX_UNITS = ("matrix", "conv")
UNITS = (*MATRIX_UNITS, "scale")
OTHER_UNITS = {"grouped": "grouped conv"}
def f(plan, op):
    """Not this: "tanh"."""
    if plan.unit in ("core", "view"):
        return OpPlan(op, "relu", (), (), None)
    if plan.unit == "chain":
        return replace(plan, unit="fused")
    return Fp2Int(0, 1, 2), Unit("stream", None)
''')
    assert names.strings >= {"sin", "neg", "cumsum.default", "matrix", "scale", "grouped", "relu", "fused"}
    assert "tanh" not in names.strings and "A docstring" not in " ".join(names.strings)
    assert "Fp2Int" in names.identifiers and "cumsum" not in names.identifiers
    assert names.units == {"matrix", "conv", "scale", "grouped", "core", "view", "relu", "chain", "fused", "stream"}
    assert text_names('cdef str k = "relu"\n  x = Relu(1)').strings == {"relu"}


def test_a_ball_is_named_by_its_kind_and_its_instruction():
    assert ball_instructions("fp2int") == {"Fp2Int"} and ball_instructions("int2fp") == {"Int2Fp"}
    files = ball_files("fp2int")
    # its kind (the Ball kinds, its arithmetic, its costs) and its instruction (the ISA, the stream's emitter)
    assert {"emulator/ball_kinds.py", "emulator/isa.py", "emulator/balls.py", "dse/units/stream.py"} <= files


def test_each_sample_change_touches_no_more_files_than_the_aim():
    for row, bound in BOUNDS.items():
        files = MEASURED[row]()
        assert len(files) <= bound, (row, sorted(files))


def test_the_docs_table_quotes_the_counted_files():
    """Each measured row of docs/architecture.md's "To change X" table lists exactly the
    files the code names for its sample change, and says how many."""
    rows = docs_rows()
    names = list(rows)
    for row, measure in MEASURED.items():
        assert row in rows, f"docs/architecture.md has no row {row!r}"
        cell, count = rows[row]
        listed = _listed(cell)
        if cell.startswith("+"):  # the row above's files, and these
            listed |= _listed(rows[names[names.index(row) - 1]][0])
        files = measure()
        assert listed == files, (row, sorted(listed ^ files))
        assert count == str(len(files)), (row, count, len(files))
