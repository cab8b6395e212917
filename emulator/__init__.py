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
    "isa": ("Barrier", "CoreOp", "DramTensor", "Fence", "Fp2Int", "Im2col", "Instr", "Int2Fp", "Matmul", "Mset",
            "Mvin", "Mvout", "Mxfp2Int", "Relu", "Transpose", "VecMatmul", "decode", "encode"),
    "program": ("Program", "Region"),
    "run": ("MODES", "Result", "Trace", "run"),
}
_MODULE_OF = {name: module for module, names in _SOURCES.items() for name in names}


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'emulator' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


VERSION = "emulator-0.1"

__all__ = [
    "VERSION", "run", "Result", "Trace", "MODES", "Program", "Region", "ChipConfig", "chip_from_dict",
    "Counters", "Counter", "CATALOGUE", "EmulatorError", "EncodeError", "ExecutionError", "ProgramError",
    "Instr", "Mset", "Mvin", "Mvout", "Fence", "Barrier", "Matmul", "VecMatmul", "Im2col", "Transpose", "Relu",
    "Fp2Int", "Int2Fp", "Mxfp2Int", "CoreOp", "DramTensor", "encode", "decode",
]
