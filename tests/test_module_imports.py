"""No import circle between two modules of one package (lazy imports inside functions
count: they are edges too, only hidden); imports under ``if TYPE_CHECKING:`` do not run and
do not count."""

from __future__ import annotations

import ast
import sys
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


# ---- an import inside a function defers a library --------------------------------------
# Hidden edges only where they buy something: an import inside a function must load a
# third-party library (torch, pandas, sqlalchemy, numpy...) that its module does not load
# already, or read its own package's `__init__` (which imports the module: the one circle a
# package may have). Everything else sits at the top, where every tool sees it. The CLI's
# command modules are the exception: they defer each command's imports so that `dse --help`
# and the store's short commands start fast (bench/bench_startup.py).
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
DEFERRING_PACKAGES = ("dse.cli.",)


def _lazy_names(trees: dict[str, ast.AST]) -> dict[str, dict[str, str]]:
    """Per package `__init__`, the names it loads on first use (`dse.lazy.lazy_attributes`'s
    `_SOURCES`: module -> names) and the module each comes from."""
    out: dict[str, dict[str, str]] = {}
    for mod, tree in trees.items():
        if not mod.endswith(".__init__"):
            continue
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                    and any(isinstance(t, ast.Name) and t.id == "_SOURCES" for t in node.targets)):
                for key, names in zip(node.value.keys, node.value.values):
                    for name in names.elts:
                        out.setdefault(mod, {})[name.value] = f"{mod[:-len('.__init__')]}.{key.value}"
    return out


def _top_level(tree: ast.AST):
    """The statements that run when the module is imported (not in a function's body)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))


class _Imports:
    """What each statement imports: modules of the repository (lazy names resolved to the
    module that defines them) and third-party roots; and what importing a module loads."""

    def __init__(self, mods: dict[str, Path]):
        self.mods = mods
        self.trees = {mod: ast.parse(path.read_text()) for mod, path in mods.items()}
        self.lazy = _lazy_names(self.trees)
        self._closure: dict[str, tuple[set[str], set[str]]] = {}

    def resolve(self, name: str) -> str | None:
        return name if name in self.mods else (name + ".__init__" if name + ".__init__" in self.mods else None)

    def ancestors(self, mod: str) -> list[str]:
        parts = mod.split(".")
        found = (self.resolve(".".join(parts[:i])) for i in range(1, len(parts)))
        return [a for a in found if a and a != mod]

    def loads(self, mod: str, node: ast.stmt) -> tuple[list[str], set[str]]:
        """(repository modules, third-party modules) the statement `node` of `mod` names."""
        inside, outside = [], set()
        if isinstance(node, ast.ImportFrom):
            package = mod.split(".")[:-1]
            base = package[:len(package) - (node.level - 1)] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            if not self.resolve(".".join(target)) and not node.level:
                outside.add(".".join(target))
            for alias in node.names:
                found = self.resolve(".".join(target + [alias.name]))
                if not found and (package_init := self.resolve(".".join(target))):
                    found = self.resolve(self.lazy.get(package_init, {}).get(alias.name, "")) or package_init
                if found:
                    inside.append(found)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                found = self.resolve(alias.name)
                if found:
                    inside.append(found)
                else:
                    outside.add(alias.name)
        inside = [m for m in inside if m != mod]
        return inside, {name for name in outside if name.split(".")[0] not in STDLIB}

    def closure(self, mod: str) -> tuple[set[str], set[str]]:
        """(repository modules, third-party modules) importing `mod` loads."""
        if mod not in self._closure:
            seen, roots, stack = {mod}, set(), [mod, *self.ancestors(mod)]
            seen.update(stack)
            while stack:
                here = stack.pop()
                for node in _top_level(self.trees[here]):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        inside, outside = self.loads(here, node)
                        roots |= outside
                        for m in inside + [a for m in inside for a in self.ancestors(m)]:
                            if m not in seen:
                                seen.add(m)
                                stack.append(m)
            self._closure[mod] = (seen, roots)
        return self._closure[mod]

    def needless_lazy_imports(self, deferring=DEFERRING_PACKAGES) -> list[str]:
        found = []
        for mod, tree in self.trees.items():
            if mod.startswith(deferring):
                continue
            _, own_roots = self.closure(mod)
            in_functions = {id(node): node for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                            for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))}
            for node in sorted(in_functions.values(), key=lambda n: n.lineno):
                inside, outside = self.loads(mod, node)
                defers = outside - own_roots
                for m in inside + [a for m in inside for a in self.ancestors(m)]:
                    defers |= self.closure(m)[1] - own_roots
                reads_own_package = any(m in self.ancestors(mod) for m in inside)
                if not defers and not reads_own_package:
                    found.append(f"{mod}:{node.lineno}: {ast.unparse(node)}")
        return found


def test_an_import_inside_a_function_defers_a_library():
    assert _Imports(_modules()).needless_lazy_imports() == []


def test_a_needless_import_inside_a_function_is_found(tmp_path):
    pkg = tmp_path / "dse" / "p"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n")
    (pkg / "heavy.py").write_text("import torch\n")
    (pkg / "light.py").write_text("import json\n")
    (pkg / "a.py").write_text(
        "def f():\n"
        "    import json\n"          # stdlib: belongs at the top
        "    from . import light\n"  # loads nothing new
        "    from . import heavy\n"  # defers torch: kept
        "    import pandas\n"        # a library: kept
        "    from . import f\n")     # its own package's __init__ (which imports a): kept
    mods = {".".join(p.relative_to(tmp_path).with_suffix("").parts): p for p in tmp_path.rglob("*.py")}
    found = _Imports(mods).needless_lazy_imports()
    assert [line.split(": ", 1)[1] for line in found] == ["import json", "from . import light"]
