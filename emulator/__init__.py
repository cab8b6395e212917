"""The emulator: a functional bank model and a timing model for Buckyball-family chips.

Importable without ``dse``: it takes a :class:`Program`, a chip config
(:class:`emulator.chip.ChipConfig`) and a DRAM image, and returns a :class:`Result`::

    from emulator import run, Program, Region, Mset, Mvin, Mvout, Matmul, Fence
    result = run(program, chip, {"A": a, "B": b}, mode="overlapped", trace=False)
    result.outputs["C"], result.counters.value("cycles"), result.trace

* :mod:`emulator.isa` - the instructions, their exact semantics and encodings;
* :mod:`emulator.program` - programs and DRAM regions;
* :mod:`emulator.machine` - the functional bank model;
* :mod:`emulator.balls` - bit-exact Ball arithmetic; :mod:`emulator.coreops` - core ops;
* :mod:`emulator.timing` - the ``serial`` and ``overlapped`` timing models;
* :mod:`emulator.counters` - the counter catalogue; :mod:`emulator.programs` - example
  program builders (tiled matmul).
"""

import importlib

# Names load on first use (PEP 562), so `import emulator.formula` (the acceptance criteria's
# expressions) does not bring in the whole emulator: read-only commands stay light.
_SOURCES = {
    "chip": ("ChipConfig", "chip_from_dict"),
    "counters": ("CATALOGUE", "Counter", "Counters"),
    "errors": ("EmulatorError", "EncodeError", "ExecutionError", "ProgramError"),
    "isa": ("CoreOp", "DramTensor", "Instr", "decode", "encode"),
    "program": ("Program", "Region"),
    "run": ("MODES", "Result", "Trace", "run"),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}


def _instructions() -> dict:
    """The accelerator's instructions by class name (`isa.ACCELERATOR_CLASSES`): a new one is
    exported as it is added there."""
    return {cls.__name__: cls for cls in importlib.import_module(".isa", __name__).ACCELERATOR_CLASSES}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    elif name == "__all__":
        value = ["VERSION", *_MODULE_OF, *_instructions()]
    elif name[:1].isupper() and name in _instructions():
        value = _instructions()[name]
    else:
        raise AttributeError(f"module 'emulator' has no attribute {name!r}")
    globals()[name] = value
    return value


VERSION = "emulator-0.1"
