"""Programs: one instruction list per core, and the named DRAM regions they read and write.

A :class:`Program` holds ``cores[c]``, the instruction list of core ``c`` (cores without a
list stay idle), and names its DRAM ``inputs`` and ``outputs`` as :class:`Region`\\ s
(address, shape, dtype). SPMD programs are built with :meth:`Program.spmd`, which calls
``build(core_id)`` once per core. The DRAM image is a flat byte array addressed from 0;
``dram_bytes`` is its size (default: the end of the highest region, rounded up to 64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from .errors import ProgramError
from .isa import ACCELERATOR_CLASSES, CoreOp, Instr, layout

DTYPES: dict[str, np.dtype] = {
    "int8": np.dtype("<i1"), "uint8": np.dtype("<u1"), "int16": np.dtype("<i2"), "int32": np.dtype("<i4"),
    "uint32": np.dtype("<u4"), "int64": np.dtype("<i8"), "fp32": np.dtype("<f4"), "float32": np.dtype("<f4"),
    "bool": np.dtype("?"),  # one byte a value (masks)
}


def np_dtype(name: str) -> np.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ProgramError(f"dtype {name!r} is not one of {sorted(DTYPES)}") from None


@dataclass(frozen=True)
class Region:
    """A named DRAM tensor: C-contiguous ``shape`` of ``dtype`` at byte ``addr``."""

    addr: int
    shape: tuple[int, ...]
    dtype: str = "int8"

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        np_dtype(self.dtype)
        if self.addr < 0:
            raise ProgramError(f"region address {self.addr} is negative")

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np_dtype(self.dtype).itemsize

    @property
    def end(self) -> int:
        return self.addr + self.nbytes


@dataclass
class Program:
    cores: list[list[Instr]]
    inputs: dict[str, Region] = field(default_factory=dict)
    outputs: dict[str, Region] = field(default_factory=dict)
    dram_bytes: int | None = None
    name: str = ""

    def __post_init__(self):
        self.cores = [list(c) for c in self.cores]
        for c, instrs in enumerate(self.cores):
            for pc, ins in enumerate(instrs):
                if not isinstance(ins, ACCELERATOR_CLASSES + (CoreOp,)):
                    raise ProgramError(f"core {c}, instruction #{pc}: {ins!r} is not an instruction")
        if self.dram_bytes is None:
            end = max((r.end for r in (*self.inputs.values(), *self.outputs.values())), default=0)
            self.dram_bytes = -(-end // 64) * 64

    @classmethod
    def spmd(cls, build: Callable[[int], Iterable[Instr]], cores: int, *,
             inputs: Mapping[str, Region] | None = None, outputs: Mapping[str, Region] | None = None,
             dram_bytes: int | None = None, name: str = "") -> "Program":
        """The same program on `cores` cores: ``build(core_id)`` gives core ``core_id``'s list."""
        return cls([list(build(c)) for c in range(cores)], dict(inputs or {}), dict(outputs or {}),
                   dram_bytes, name)

    @property
    def n_instructions(self) -> int:
        return sum(len(c) for c in self.cores)

    def encode(self, chip) -> list[np.ndarray]:
        """Per core, an ``(n, 3)`` uint64 array of ``(funct7, rs1, rs2)``; core ops are left
        out (they run on the core and have no accelerator encoding)."""
        lay = layout(chip)
        out = []
        for instrs in self.cores:
            words = [lay.encode(i) for i in instrs if not isinstance(i, CoreOp)]
            out.append(np.array(words, dtype=np.uint64).reshape(-1, 3))
        return out

    @staticmethod
    def decode(words: Sequence[np.ndarray], chip, **kw) -> "Program":
        """The program whose accelerator instructions `words` (as from :meth:`encode`) holds."""
        lay = layout(chip)
        return Program([[lay.decode(int(f), int(a), int(b)) for f, a, b in np.asarray(w).reshape(-1, 3)]
                        for w in words], **kw)

    def image(self, values: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """A DRAM image of ``dram_bytes`` zero bytes with the named inputs written in."""
        img = np.zeros(self.dram_bytes or 0, dtype=np.uint8)
        for name, value in (values or {}).items():
            if name not in self.inputs:
                raise ProgramError(f"DRAM value {name!r} names no input; inputs are {sorted(self.inputs)}")
            write_region(img, self.inputs[name], value, name)
        return img


def write_region(img: np.ndarray, region: Region, value, name: str = "") -> None:
    arr = np.asarray(value)
    if arr.shape != region.shape:
        raise ProgramError(f"input {name!r} has shape {arr.shape}, its region is {region.shape}")
    data = np.ascontiguousarray(arr, dtype=np_dtype(region.dtype))
    if region.end > img.size:
        raise ProgramError(f"input {name!r} ends at byte {region.end}, past the {img.size}-byte DRAM image")
    img[region.addr:region.end] = data.reshape(-1).view(np.uint8)


def read_region(img: np.ndarray, region: Region, name: str = "") -> np.ndarray:
    if region.end > img.size:
        raise ProgramError(f"output {name!r} ends at byte {region.end}, past the {img.size}-byte DRAM image")
    return img[region.addr:region.end].view(np_dtype(region.dtype)).reshape(region.shape).copy()
