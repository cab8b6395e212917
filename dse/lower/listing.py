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


def _tensor(tensor: DramTensor | None) -> str:
    if tensor is None:
        return "-"
    strides = "" if tensor.strides is None else f" strides {tuple(tensor.strides)}"
    return f"@{tensor.addr:#x} {tensor.dtype}[{'x'.join(map(str, tensor.shape))}]{strides}"


def _param(value) -> str:
    if hasattr(value, "kind") and hasattr(value, "name"):  # a graph op
        return f"{value.kind} {value.name}"
    if isinstance(value, (list, tuple)) and value and all(hasattr(item, "kind") for item in value):
        return "[" + ", ".join(item.name for item in value) + "]"
    if isinstance(value, np.ndarray):
        return f"array {value.dtype}{list(value.shape)}"
    return repr(value)


def instruction_text(ins) -> str:
    """One instruction on one line: an accelerator instruction as the ISA describes it
    (addresses in hex), a core op as its kind, destination, sources and parameters."""
    if isinstance(ins, CoreOp):
        params = ", ".join(f"{name}={_param(value)}" for name, value in ins.params.items())
        srcs = "; ".join(_tensor(src) for src in ins.srcs)
        return (f"CORE {ins.kind} {_tensor(ins.dst)} <- {srcs or '-'}" + (f" ({params})" if params else "")
                + f", {ins.element_count():,} elements")
    return ins.describe()


def program_listing(program, labels: dict[int, str]) -> list[ListingLine]:
    """Every instruction of `program`, core by core in program order, with the op that
    emitted it (`labels`: id of an instruction -> op name, as `Lowered.labels` keeps them)."""
    return [ListingLine(core, pc, labels.get(id(ins), UNLABELLED), instruction_text(ins))
            for core, instrs in enumerate(program.cores) for pc, ins in enumerate(instrs)]


def listing_text(lines: list[ListingLine]) -> str:
    """The listing as text: a header per core, then ``pc  op  instruction`` lines."""
    out: list[str] = []
    width = max((len(line.op) for line in lines), default=2)
    core = None
    for line in lines:
        if line.core != core:
            core = line.core
            count = sum(1 for other in lines if other.core == core)
            out.append(f"core {core}: {count} instruction(s)")
        out.append(f"  {line.pc:>6}  {line.op:<{width}}  {line.text}")
    return "\n".join(out)


def _canonical(value, digest) -> None:
    """Feed `value` into the hash `h`, every field that changes what a program does."""
    if isinstance(value, np.ndarray):
        digest.update(f"nd{value.dtype.str}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        digest.update(type(value).__name__.encode() + b"(")
        for each in dataclasses.fields(value):
            digest.update(each.name.encode() + b"=")
            _canonical(getattr(value, each.name), digest)
        digest.update(b")")
    elif isinstance(value, dict):
        digest.update(b"{")
        for key in sorted(value, key=str):
            digest.update(str(key).encode() + b":")
            _canonical(value[key], digest)
        digest.update(b"}")
    elif isinstance(value, (list, tuple)):
        digest.update(b"[")
        for item in value:
            _canonical(item, digest)
            digest.update(b",")
        digest.update(b"]")
    elif hasattr(value, "numpy") and callable(value.numpy):  # a torch tensor among a graph op's attributes
        _canonical(np.asarray(value.numpy()), digest)
    else:
        digest.update(repr(value).encode())
    digest.update(b";")


def program_digest(program) -> str:
    """sha256 of `program`'s content: its cores' instructions, field by field (a core op's
    parameters included, arrays by their bytes), and its DRAM size."""
    digest = hashlib.sha256()
    digest.update(f"dram {program.dram_bytes}; cores {len(program.cores)};".encode())
    for core, instrs in enumerate(program.cores):
        digest.update(f"core {core} {len(instrs)}:".encode())
        for ins in instrs:
            _canonical(ins, digest)
    return digest.hexdigest()


def bytes_digest(data) -> str:
    """sha256 of an array's or a buffer's bytes (a DRAM image)."""
    return hashlib.sha256(np.ascontiguousarray(data).view(np.uint8).reshape(-1).data).hexdigest()


__all__ = ["ListingLine", "UNLABELLED", "bytes_digest", "instruction_text", "listing_text", "program_digest",
           "program_listing"]
