"""A lowered program as a person reads it, and its identity.

`program_listing`: per core, every instruction in program order with the graph op that
emitted it (`Lowered.labels`); `program_digest`: the sha256 of the program's whole
content (every field of every instruction, a core op's arrays by their bytes), what a run
records so a rerun on a different program shows (`dse replay`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np

from emulator.isa import CoreOp, DramTensor

UNLABELLED = "(sync)"  # an instruction no op emitted: the BARRIERs that line stages and slots up


@dataclass(frozen=True)
class ListingLine:
    core: int
    pc: int
    op: str  # the graph op that emitted it (`UNLABELLED` for a placement's own BARRIERs)
    text: str


def _tensor(t: DramTensor | None) -> str:
    if t is None:
        return "-"
    strides = "" if t.strides is None else f" strides {tuple(t.strides)}"
    return f"@{t.addr:#x} {t.dtype}[{'x'.join(map(str, t.shape))}]{strides}"


def _param(value) -> str:
    if hasattr(value, "kind") and hasattr(value, "name"):  # a graph op
        return f"{value.kind} {value.name}"
    if isinstance(value, (list, tuple)) and value and all(hasattr(v, "kind") for v in value):
        return "[" + ", ".join(v.name for v in value) + "]"
    if isinstance(value, np.ndarray):
        return f"array {value.dtype}{list(value.shape)}"
    return repr(value)


def instruction_text(ins) -> str:
    """One instruction on one line: an accelerator instruction as the ISA describes it
    (addresses in hex), a core op as its kind, destination, sources and parameters."""
    if isinstance(ins, CoreOp):
        params = ", ".join(f"{k}={_param(v)}" for k, v in ins.params.items())
        srcs = "; ".join(_tensor(s) for s in ins.srcs)
        return (f"CORE {ins.kind} {_tensor(ins.dst)} <- {srcs or '-'}" + (f" ({params})" if params else "")
                + f", {ins.element_count():,} elements")
    return ins.describe()


def program_listing(program, labels: dict[int, str]) -> list[ListingLine]:
    """Every instruction of `program`, core by core in program order, with the op that
    emitted it (`labels`: id of an instruction -> op name, as `Lowered.labels` keeps them)."""
    return [ListingLine(c, pc, labels.get(id(ins), UNLABELLED), instruction_text(ins))
            for c, instrs in enumerate(program.cores) for pc, ins in enumerate(instrs)]


def listing_text(lines: list[ListingLine]) -> str:
    """The listing as text: a header per core, then ``pc  op  instruction`` lines."""
    out: list[str] = []
    width = max((len(line.op) for line in lines), default=2)
    core = None
    for line in lines:
        if line.core != core:
            core = line.core
            n = sum(1 for x in lines if x.core == core)
            out.append(f"core {core}: {n} instruction(s)")
        out.append(f"  {line.pc:>6}  {line.op:<{width}}  {line.text}")
    return "\n".join(out)


def _canonical(value, h) -> None:
    """Feed `value` into the hash `h`, every field that changes what a program does."""
    if isinstance(value, np.ndarray):
        h.update(f"nd{value.dtype.str}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        h.update(type(value).__name__.encode() + b"(")
        for f in dataclasses.fields(value):
            h.update(f.name.encode() + b"=")
            _canonical(getattr(value, f.name), h)
        h.update(b")")
    elif isinstance(value, dict):
        h.update(b"{")
        for k in sorted(value, key=str):
            h.update(str(k).encode() + b":")
            _canonical(value[k], h)
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        h.update(b"[")
        for v in value:
            _canonical(v, h)
            h.update(b",")
        h.update(b"]")
    elif hasattr(value, "numpy") and callable(value.numpy):  # a torch tensor among a graph op's attributes
        _canonical(np.asarray(value.numpy()), h)
    else:
        h.update(repr(value).encode())
    h.update(b";")


def program_digest(program) -> str:
    """sha256 of `program`'s content: its cores' instructions, field by field (a core op's
    parameters included, arrays by their bytes), and its DRAM size."""
    h = hashlib.sha256()
    h.update(f"dram {program.dram_bytes}; cores {len(program.cores)};".encode())
    for c, instrs in enumerate(program.cores):
        h.update(f"core {c} {len(instrs)}:".encode())
        for ins in instrs:
            _canonical(ins, h)
    return h.hexdigest()


def bytes_digest(data) -> str:
    """sha256 of an array's or a buffer's bytes (a DRAM image)."""
    return hashlib.sha256(np.ascontiguousarray(data).view(np.uint8).reshape(-1).data).hexdigest()


__all__ = ["ListingLine", "UNLABELLED", "bytes_digest", "instruction_text", "listing_text", "program_digest",
           "program_listing"]
