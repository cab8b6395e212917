"""No import circle between two modules of one package (lazy imports inside functions
count: they are edges too, only hidden); imports under ``if TYPE_CHECKING:`` do not run and
do not count."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    out = {}
    for path in list((REPO / "dse").rglob("*.py")) + list((REPO / "emulator").rglob("*.py")):
        out[".".join(path.relative_to(REPO).with_suffix("").parts)] = path
    return out


def _runtime_nodes(tree: ast.AST):
    """Every node but those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def module_edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    def resolve(name: str) -> str | None:
        return name if name in mods else (name + ".__init__" if name + ".__init__" in mods else None)

    edges: dict[str, set[str]] = {}
    for mod, path in mods.items():
        package = mod.split(".")[:-1]
        for node in _runtime_nodes(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = package[:len(package) - (node.level - 1)] if node.level else []
                target = base + (node.module.split(".") if node.module else [])
                # `from pkg import sub` names a module; `from mod import name` the module itself
                targets = [resolve(".".join(target + [a.name])) or resolve(".".join(target)) for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            edges.setdefault(mod, set()).update(t for t in targets if t and t != mod)
    return edges


def circles_within_packages(edges: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Pairs (a, b) of modules of one package (not its __init__) that reach each other
    through modules of that package."""
    def package(m: str) -> str:
        return m.rsplit(".", 1)[0]

    def inside(a: str, b: str) -> bool:
        return package(a) == package(b) and not b.endswith("__init__")

    found = set()
    for a, targets in edges.items():
        if a.endswith("__init__"):
            continue
        for b in (t for t in targets if inside(a, t)):
            stack, seen = [b], {b}
            while stack:
                for nxt in edges.get(stack.pop(), ()):
                    if nxt == a:
                        found.add(tuple(sorted((a, b))))
                        stack = []
                        break
                    if inside(a, nxt) and nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)
    return found


def test_no_import_circle_inside_a_package():
    assert circles_within_packages(module_edges(_modules())) == set()


def test_the_circle_finder_finds_a_lazy_circle_and_ignores_type_checking(tmp_path):
    pkg = tmp_path / "dse" / "p"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from .a import y\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n")
    (pkg / "d.py").write_text("from . import c\n")
    mods = {".".join(p.relative_to(tmp_path).with_suffix("").parts): p for p in tmp_path.rglob("*.py")}
    assert circles_within_packages(module_edges(mods)) == {("dse.p.a", "dse.p.b")}
