"""Names of a package loaded on first use (PEP 562), so that importing the package (or one
light submodule of it) does not import what its other submodules need: torch, pandas.

(`emulator/__init__.py` keeps its own few lines of this: the emulator runs without dse.)"""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_attributes(package: str, sources: dict[str, tuple[str, ...]]) -> Callable[[str], object]:
    """A module `__getattr__` for `package` that imports ``package.<module>`` the first time
    one of its names (`sources`: module -> names) is read, and keeps the value."""
    module_of = {name: module for module, names in sources.items() for name in names}
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str):
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    return __getattr__
