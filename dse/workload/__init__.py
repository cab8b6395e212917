"""The workload layer: capture a recipe's model as a Graph of typed ops with counts.

Names load on first use (PEP 562): reading a graph (`dse.workload.graph`, a cached graph)
needs no torch; capture does.
"""

import sys
import types

from dse.lazy import lazy_attributes

_SOURCES = {
    "capture": ("UnsupportedOpError", "capture"),
    "graph": ("KINDS", "Graph", "Op", "OpCounts", "TensorSpec", "scale_tensor"),
    "recipes": ("Recipe", "capture_recipe", "instantiate", "list_recipes", "load_recipe"),
}
__getattr__ = lazy_attributes(__name__, _SOURCES)


class _Package(types.ModuleType):
    """`dse.workload.capture` is the function, as it always was, not the submodule of that
    name: the import system sets a package's attribute to each submodule it loads, which
    would hide the lazily loaded function (it is found by `__getattr__` instead)."""

    def __setattr__(self, name: str, value) -> None:
        if name == "capture" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "KINDS",
    "Graph",
    "Op",
    "OpCounts",
    "Recipe",
    "TensorSpec",
    "UnsupportedOpError",
    "capture",
    "capture_recipe",
    "instantiate",
    "list_recipes",
    "load_recipe",
    "scale_tensor",
]
