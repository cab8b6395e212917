"""Instructions: what each one does, its operands, and its two 64-bit operand words.

Every accelerator instruction is a RISC-V custom-3 R-type instruction (``funct7`` names it)
carrying two 64-bit register operands, ``rs1`` and ``rs2``. The emulator's instruction
classes are plain frozen dataclasses; :func:`encode` packs one into ``(funct7, rs1, rs2)``
with the field widths of a chip config and :func:`decode` unpacks it. A value that does not
fit its field is an :class:`EncodeError` naming the instruction, the field, the value and
the width; the emulator runs the same check on every instruction before executing it (the
hardware would silently truncate).

Operand words
-------------
``rs1`` is the same for every instruction (the framework's unified bank encoding)::

    bits [0, B)          bank0   first read bank   (B = isa.bank_id_bits, 10)
    bits [B, 2B)         bank1   second read bank
    bits [2B, 3B)        bank2   write bank
    bits [3B, 3B + I)    iter    iteration count   (I = isa.iter_bits, 34)

Unused bank fields and ``iter`` are 0. ``rs2`` holds the instruction's own fields, packed
from bit 0 upwards in the order listed in the table below (widths from the chip config;
``addr`` is ``dma.addr_bits``, 39). ``3B + I`` and the ``rs2`` fields must each fit 64 bits.

=========  ======  ====================  ========================  =================================
class      funct7  rs1 banks (0, 1, 2)   iter                      rs2 fields (low to high)
=========  ======  ====================  ========================  =================================
Mset       23      -, -, bank            -                         alloc (1), col (mset_col_bits)
Mvin       33      -, -, bank            beats                     addr (addr), stride (stride_bits)
Mvout      16      bank, -, -            beats                     addr (addr), stride (stride_bits)
Fence      31      -                     -                         -
Barrier    30      -                     -                         -
Matmul     65      a, b, c               -                         M, N, K (matrix_dim_bits each),
                                                                   mode (1: 0 = os, 1 = ws),
                                                                   accumulate (1), a_row, b_row,
                                                                   c_row (matrix_base_row_bits each)
VecMatmul  64      a, b, c               K                         accumulate (1)
Im2col     48      src, -, dst           -                         size, kernel, stride, pad
                                                                   (im2col_field_bits each)
Transpose  49      src, -, dst           lines                     bits (elem_bits_bits)
Relu       50      src, -, dst           lines                     bits (elem_bits_bits)
Fp2Int     51      src, -, dst           lines                     scale (scale_bits, fp32 pattern),
                                                                   out_bits (elem_bits_bits)
Int2Fp     52      src, -, dst           lines                     scale (scale_bits, fp32 pattern),
                                                                   in_bits, out_bits (elem_bits_bits)
Mxfp2Int   55      src, scales, dst      blocks                    -
=========  ======  ====================  ========================  =================================

The ``funct7`` numbers are this emulator's table, modelled on the framework's (whose own
numbering has moved between releases). :class:`CoreOp` is work for the core itself, not a
custom instruction: it has no encoding (see :mod:`emulator.coreops`).

Banks and lines
---------------
A bank operand is a *virtual bank id*: ``0 .. banks.virtual_ids - 1`` for a private bank
allocated by ``Mset``, or ``shared_memory.first_bank_id + s`` for shared-memory bank ``s``
of the core's tile (always present, one physical bank wide). A virtual bank of ``col``
physical banks is a stream of 16-byte *lines* (``banks.row_bytes``): line ``i`` lives in
physical bank ``base + i mod col`` at row ``i // col`` (the DMA beat striping); a bank
*row* is ``col`` consecutive lines (``16 * col`` bytes). All operands below are byte
ranges of that stream, starting at line 0 unless a base row is given. Multi-byte
elements are little-endian.

Instruction semantics
---------------------
``Mset(bank, col, alloc)``
    alloc: take the first ``col`` consecutive free physical banks (first fit) for virtual
    bank ``bank``; no free run is an error (no spilling). Contents are whatever the
    physical banks last held (zero at reset). free (``alloc=False``, ``col`` 0): release.
``Mvin(bank, addr, iter, stride)``
    DRAM -> bank: ``iter`` 16-byte beats into lines ``0 .. iter-1``. DRAM is read a bank
    row at a time: row ``r`` (``col`` beats, the last row possibly fewer) comes from
    ``addr + r * stride``; ``stride`` 0 means contiguous (the row width ``16 * col``).
``Mvout(bank, addr, iter, stride)``
    bank -> DRAM, the mirror of ``Mvin``. Rows may not overlap in DRAM
    (``stride`` is 0 or at least the row width).
``Matmul(a, b, c, M, N, K, dataflow, accumulate, a_row, b_row, c_row)``
    Matrix Ball. ``A`` is M x K int8 in layout (M, K/16, 16) - row-major with 16 K values
    a line - from row ``a_row`` of bank ``a``. ``B`` is given transposed, N x K int8 in
    the same (N, K/16, 16) layout (the layout of a ``torch.nn.Linear`` weight), from row
    ``b_row`` of bank ``b``. ``C`` is M x N int32 row-major, layout (M, N/16, 16) - one
    64-byte row of a col-4 accumulator bank holds 16 int32 - from row ``c_row`` of bank
    ``c``, whose col must be a multiple of ``banks.acc_col``.
    ``C = (C if accumulate else 0) + A @ B.T``, exact products summed and added in int32
    with two's-complement wraparound. K and N must be multiples of 16 (the toolchain pads
    every dimension to 16); M is any positive count. ``dataflow`` (ws/os/is) changes timing
    only; a formula-timed matrix Ball has latencies for ws and os, ``is`` needs ``timing =
    "systolic"``. Its 2-bit code (os 0, ws 1, is 2) is split: bit 0 where the 1-bit ws/os
    field always was, bit 1 after ``c_row``.
``VecMatmul(a, b, c, iter, accumulate)``
    Vec matmul (warp16) Ball. ``X`` = K x 16 int8 (line k of bank ``a``), ``Y`` = K x 16 int8
    (line k of bank ``b``), K = ``iter``; ``C`` (16 x 16 int32, layout (16, 1, 16) from row 0
    of bank ``c``, col a multiple of ``acc_col``) becomes ``(C if accumulate else 0) + X.T @ Y``
    with int32 wraparound.
``Im2col(src, dst, size, kernel, stride, pad)``
    Single-channel int8 image ``size`` x ``size`` row-major from byte 0 of ``src``; zero
    padding ``pad`` on every side; ``out = (size + 2*pad - kernel) // stride + 1``. Writes the
    matrix Ball's A layout to ``dst``: row ``p = oy*out + ox`` holds the patch
    ``x[oy*stride + ky, ox*stride + kx]`` for ``ky, kx`` in row-major order, then zeros up to
    ``ceil(kernel**2 / 16) * 16`` bytes. Limits (Ball config ``limits``): size <= 34,
    kernel <= 7, pad <= 3.
``Transpose(src, dst, iter, bits)``
    ``bits`` 8 or 32; ``E = 128 / bits`` elements a line. The ``iter`` lines (a multiple of E)
    are ``iter / E`` blocks of E x E elements; each block is transposed (element (i, j) of
    block b -> element (j, i) of block b). Bit patterns are moved unchanged.
``Relu(src, dst, iter, bits)``
    ``iter`` lines of int8 (bits 8) or int32 (bits 32): ``max(x, 0)``.
``Fp2Int(src, dst, iter, scale, out_bits)``
    ``iter`` lines of fp32 (4 a line). ``y = x * scale`` in fp32 (IEEE, round to nearest
    even), then rounded half to even to an integer and saturated to int32 (``out_bits`` 32)
    or int8 (8); NaN gives 0, infinities saturate. Output packed densely from byte 0 of
    ``dst`` (a partial last line is written under the byte mask; its other bytes keep
    their value).
``Int2Fp(src, dst, iter, scale, in_bits, out_bits)``
    ``iter`` lines of int32 (``in_bits`` 32, 4 a line) or int8 (8, 16 a line). ``y = fp32(x)
    * scale`` in fp32 (conversion and product round to nearest even). ``out_bits`` 32 writes
    fp32; ``out_bits`` 8 requantizes: ``y`` rounded half to even and saturated to int8
    (NaN -> 0) - exactly ``torch.round(x.float() * scale).clamp(-128, 127)``. Packed output
    as for Fp2Int.
``Mxfp2Int(src, scales, dst, iter)``
    ``iter`` MXFP4 blocks. Block b's 32 FP4 (E2M1) values are line b of ``src`` (value 2j in
    the low nibble of byte j, 2j+1 in the high nibble); its E8M0 scale is byte b of
    ``scales`` (from byte 0). ``y = fp4 * 2**(e - 127)`` (exact), rounded half to even and
    saturated to int8; scale byte 0xFF (NaN) gives 0. Block b's 32 int8 go to lines
    ``2b, 2b+1`` of ``dst``.
``Fence()``
    Waits until every earlier instruction of the core has committed.
``Barrier()``
    A fence, then waits for every core of the tile (``cores.tile_size``) to arrive.
"""

from __future__ import annotations

import math
import operator
import struct
from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Literal, Mapping

from .errors import EncodeError


def _f32(x: float) -> float:
    """Round a Python float to the nearest fp32 value (the hardware's scale register)."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def bits_f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", int(b) & 0xFFFFFFFF))[0]


class Instr:
    """Base of every instruction (accelerator instructions and core ops)."""

    __slots__ = ()
    op: str = "?"
    ball: str | None = None  # the Ball kind a lane Ball's instruction runs on (`emulator.balls.LANES`)

    def describe(self) -> str:
        parts = []
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if f.name in ("addr",) and isinstance(v, int):
                v = hex(v)
            parts.append(f"{f.name}={v}")
        return f"{self.op}(" + ", ".join(parts) + ")"

    def __str__(self) -> str:
        return self.describe()


@dataclass(frozen=True, slots=True)
class Mset(Instr):
    bank: int
    col: int = 1
    alloc: bool = True
    op = "MSET"

    def __post_init__(self):
        if not self.alloc:
            object.__setattr__(self, "col", 0)  # a free carries no col


@dataclass(frozen=True, slots=True)
class Mvin(Instr):
    bank: int
    addr: int
    iter: int
    stride: int = 0
    op = "MVIN"


@dataclass(frozen=True, slots=True)
class Mvout(Instr):
    bank: int
    addr: int
    iter: int
    stride: int = 0
    op = "MVOUT"


@dataclass(frozen=True, slots=True)
class Fence(Instr):
    op = "FENCE"


@dataclass(frozen=True, slots=True)
class Barrier(Instr):
    op = "BARRIER"


@dataclass(frozen=True, slots=True)
class Matmul(Instr):
    a: int
    b: int
    c: int
    M: int
    N: int
    K: int
    dataflow: Literal["ws", "os", "is"] = "ws"
    accumulate: bool = False
    a_row: int = 0
    b_row: int = 0
    c_row: int = 0
    op = "MATMUL"

    def __post_init__(self):
        if self.dataflow not in _DATAFLOW:
            raise EncodeError(f"MATMUL dataflow must be 'ws', 'os' or 'is', got {self.dataflow!r}")


@dataclass(frozen=True, slots=True)
class VecMatmul(Instr):
    a: int
    b: int
    c: int
    iter: int
    accumulate: bool = True
    op = "VECMATMUL"


@dataclass(frozen=True, slots=True)
class Im2col(Instr):
    src: int
    dst: int
    size: int
    kernel: int
    stride: int = 1
    pad: int = 0
    op = "IM2COL"


@dataclass(frozen=True, slots=True)
class Transpose(Instr):
    src: int
    dst: int
    iter: int
    bits: int = 8
    op = "TRANSPOSE"


@dataclass(frozen=True, slots=True)
class Relu(Instr):
    src: int
    dst: int
    iter: int
    bits: int = 8
    op = "RELU"
    ball = "relu"  # a lane Ball (`emulator.balls.LANES`)


@dataclass(frozen=True, slots=True)
class Fp2Int(Instr):
    src: int
    dst: int
    iter: int
    scale: float = 1.0
    out_bits: int = 8
    op = "FP2INT"
    ball = "fp2int"  # a lane Ball (`emulator.balls.LANES`)

    def __post_init__(self):
        object.__setattr__(self, "scale", _f32(self.scale))


@dataclass(frozen=True, slots=True)
class Int2Fp(Instr):
    src: int
    dst: int
    iter: int
    scale: float = 1.0
    in_bits: int = 32
    out_bits: int = 32
    op = "INT2FP"
    ball = "int2fp"  # a lane Ball (`emulator.balls.LANES`)

    def __post_init__(self):
        object.__setattr__(self, "scale", _f32(self.scale))


@dataclass(frozen=True, slots=True)
class Mxfp2Int(Instr):
    src: int
    scales: int
    dst: int
    iter: int
    op = "MXFP2INT"


@dataclass(frozen=True, slots=True)
class DramTensor:
    """A typed view of DRAM for a core op: ``addr`` (bytes), ``shape``, ``dtype`` and
    optional byte ``strides`` (default C-contiguous)."""

    addr: int
    shape: tuple[int, ...]
    dtype: str = "int8"
    strides: tuple[int, ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if self.strides is not None:
            object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))
            if len(self.strides) != len(self.shape):
                raise EncodeError(f"DramTensor strides {self.strides} do not match shape {self.shape}")

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class CoreOp(Instr):
    """Work the core does itself (no Ball): see :mod:`emulator.coreops` for the kinds.

    ``elements`` is the count the core is charged for (cycles = elements x the core's
    cycles per element for this kind); ``None`` charges the largest operand's element count.
    """

    kind: str
    dst: DramTensor | None
    srcs: tuple[DramTensor, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)
    elements: int | None = None
    op = "CORE"

    def __post_init__(self):
        object.__setattr__(self, "srcs", tuple(self.srcs))

    def element_count(self) -> int:
        if self.elements is not None:
            return int(self.elements)
        sizes = [t.size for t in self.srcs] + ([self.dst.size] if self.dst is not None else [])
        return max(sizes, default=0)


ACCELERATOR_CLASSES = (Mset, Mvin, Mvout, Fence, Barrier, Matmul, VecMatmul, Im2col, Transpose, Relu, Fp2Int,
                       Int2Fp, Mxfp2Int)

FUNCT7: dict[type, int] = {
    Mset: 23, Mvin: 33, Mvout: 16, Fence: 31, Barrier: 30, Matmul: 65, VecMatmul: 64, Im2col: 48,
    Transpose: 49, Relu: 50, Fp2Int: 51, Int2Fp: 52, Mxfp2Int: 55,
}
BY_FUNCT7: dict[int, type] = {v: k for k, v in FUNCT7.items()}

# ---------------------------------------------------------------------------------------
# Field layouts. A width key names an IsaFields attribute, "addr" (dma.addr_bits) or is an
# int (a fixed width). Conversions map the dataclass value to the field's unsigned integer
# and back.

_ident: Callable[[Any], int] = int


def _bool_in(v: Any) -> int:
    return int(bool(v))


# Matmul dataflow: a 2-bit code in two 1-bit fields, the low bit where the original 1-bit
# ws/os field sits (so ws/os encodings are unchanged), the high bit after c_row. Decoding
# ORs the two parts back together (see Layout.decode).
_DATAFLOW = {"os": 0, "ws": 1, "is": 2}
_DATAFLOW_BACK = {v: k for k, v in _DATAFLOW.items()}

# (attribute, width key, to_field, from_field)
_RS2: dict[type, tuple[tuple[str, Any, Callable, Callable], ...]] = {
    Mset: (("alloc", 1, _bool_in, bool), ("col", "mset_col_bits", int, int)),
    Mvin: (("addr", "addr", int, int), ("stride", "stride_bits", int, int)),
    Mvout: (("addr", "addr", int, int), ("stride", "stride_bits", int, int)),
    Fence: (),
    Barrier: (),
    Matmul: (("M", "matrix_dim_bits", int, int), ("N", "matrix_dim_bits", int, int),
             ("K", "matrix_dim_bits", int, int),
             ("dataflow", 1, lambda v: _DATAFLOW[v] & 1, int),
             ("accumulate", 1, _bool_in, bool),
             ("a_row", "matrix_base_row_bits", int, int), ("b_row", "matrix_base_row_bits", int, int),
             ("c_row", "matrix_base_row_bits", int, int),
             ("dataflow", 1, lambda v: _DATAFLOW[v] >> 1, lambda v: v << 1)),
    VecMatmul: (("accumulate", 1, _bool_in, bool),),
    Im2col: (("size", "im2col_field_bits", int, int), ("kernel", "im2col_field_bits", int, int),
             ("stride", "im2col_field_bits", int, int), ("pad", "im2col_field_bits", int, int)),
    Transpose: (("bits", "elem_bits_bits", int, int),),
    Relu: (("bits", "elem_bits_bits", int, int),),
    Fp2Int: (("scale", "scale_bits", f32_bits, bits_f32), ("out_bits", "elem_bits_bits", int, int)),
    Int2Fp: (("scale", "scale_bits", f32_bits, bits_f32), ("in_bits", "elem_bits_bits", int, int),
             ("out_bits", "elem_bits_bits", int, int)),
    Mxfp2Int: (),
}
# rs1: which attribute goes to bank0, bank1, bank2 and iter.
_RS1: dict[type, tuple[str | None, str | None, str | None, str | None]] = {
    Mset: (None, None, "bank", None),
    Mvin: (None, None, "bank", "iter"),
    Mvout: ("bank", None, None, "iter"),
    Fence: (None, None, None, None),
    Barrier: (None, None, None, None),
    Matmul: ("a", "b", "c", None),
    VecMatmul: ("a", "b", "c", "iter"),
    Im2col: ("src", None, "dst", None),
    Transpose: ("src", None, "dst", "iter"),
    Relu: ("src", None, "dst", "iter"),
    Fp2Int: ("src", None, "dst", "iter"),
    Int2Fp: ("src", None, "dst", "iter"),
    Mxfp2Int: ("src", "scales", "dst", "iter"),
}


def _width(chip, key) -> int:
    if isinstance(key, int):
        return key
    if key == "addr":
        return chip.dma.addr_bits
    return getattr(chip.isa, key)


class Layout:
    """The resolved field layout of every instruction class for one chip config."""

    def __init__(self, chip):
        isa = chip.isa
        self.bank_bits = B = isa.bank_id_bits
        self.iter_bits = I = isa.iter_bits
        if 3 * B + I > 64:
            raise EncodeError(
                f"rs1 needs 3 x bank_id_bits ({B}) + iter_bits ({I}) = {3 * B + I} bits, more than 64 "
                f"(chip {chip.name})")
        self.classes: dict[type, tuple] = {}
        for cls in ACCELERATOR_CLASSES:
            rs1 = []
            for slot, attr in enumerate(_RS1[cls]):
                if attr is None:
                    continue
                shift = slot * B
                width = B if slot < 3 else I
                rs1.append((attr, shift, width, (1 << width) - 1, "bank_id_bits" if slot < 3 else "iter_bits"))
            rs2 = []
            shift = 0
            for attr, key, to_f, from_f in _RS2[cls]:
                width = _width(chip, key)
                rs2.append((attr, shift, width, (1 << width) - 1, to_f, from_f))
                shift += width
            if shift > 64:
                names = ", ".join(f"{a} ({w})" for a, _, w, *_ in rs2)
                raise EncodeError(f"{cls.op} rs2 fields {names} need {shift} bits, more than 64 (chip {chip.name})")
            self.classes[cls] = (tuple(rs1), tuple(rs2))
        # Fast checks: one compiled expression per class over its integer fields (flags and
        # the dataflow always fit; an fp32 scale fits any field of >= 32 bits).
        self.fast: dict[type, Callable[[Instr], bool]] = {}
        for cls, (rs1, rs2) in self.classes.items():
            terms = [f"0 <= i.{attr} <= {mx}" for attr, _, _, mx, _ in rs1]
            for attr, _, width, mx, to_f, _ in rs2:
                if to_f is int:
                    terms.append(f"0 <= i.{attr} <= {mx}")
                elif to_f is f32_bits and width < 32:
                    terms.append("False")
            src = "def chk(i):\n    return " + (" and ".join(terms) or "True") + "\n"
            ns: dict[str, Any] = {}
            exec(src, ns)  # noqa: S102 - generated from the field table above
            self.fast[cls] = ns["chk"]
        import numpy as np

        self._int_fields: dict[type, tuple] = {}
        for cls, (rs1, rs2) in self.classes.items():
            names = [attr for attr, _, _, mx, _ in rs1] + [attr for attr, _, _, mx, to_f, _ in rs2 if to_f is int]
            maxes = [mx for attr, _, _, mx, _ in rs1] + [mx for attr, _, _, mx, to_f, _ in rs2 if to_f is int]
            others = any(to_f is f32_bits and width < 32 for _, _, width, _, to_f, _ in rs2)
            self._int_fields[cls] = (tuple(names), np.array(maxes, dtype=np.int64), others)

    def check_all(self, instrs) -> int:
        """Index of the first instruction with a field that does not fit, or -1.

        Vectorised: the distinct values of each integer field of a class's instructions are
        gathered with one ``attrgetter`` pass into a set (programs repeat few values: 3x
        faster than an array of them all), and only a class with a field whose values are
        not all plain ints in range is gathered as arrays to find which instructions hold
        the bad ones."""
        import numpy as np

        by_cls: defaultdict[type, list] = defaultdict(list)
        for ins in instrs:
            by_cls[type(ins)].append(ins)
        first = -1
        for cls, objs in by_cls.items():
            spec = self._int_fields.get(cls)
            if spec is None:  # CoreOp
                continue
            names, maxes, others = spec
            clean = not others
            for name, mx in zip(names, maxes):
                if not clean:
                    break
                try:
                    vals = set(map(operator.attrgetter(name), objs))
                    clean = all(type(x) is int for x in vals) and min(vals) >= 0 and max(vals) <= mx
                except TypeError:  # unhashable values: the arrays decide
                    clean = False
            if clean:
                continue
            idx = [i for i, ins in enumerate(instrs) if type(ins) is cls]
            if names:
                bad = np.zeros(len(idx), dtype=bool)
                for name, mx in zip(names, maxes):
                    try:
                        v = np.fromiter(map(operator.attrgetter(name), objs), dtype=np.int64, count=len(idx))
                        bad |= (v < 0) | (v > mx)
                    except (OverflowError, TypeError, ValueError):
                        bad[:] = True  # huge or odd values: the slow check decides
                hits = np.flatnonzero(bad)
            else:
                hits = np.zeros(0, dtype=np.int64)
            cand = [idx[h] for h in hits]
            if others:  # fp32 scales in a field narrower than 32 bits
                cand += [i for i in idx if not self.fast[cls](instrs[i])]
            for i in sorted(set(cand)):
                try:
                    self.check(instrs[i])
                except EncodeError:
                    first = i if first < 0 else min(first, i)
                    break
        return first

    def check(self, ins: Instr) -> None:
        """Raise EncodeError if any field value of `ins` does not fit its width."""
        if self.fast[type(ins)](ins):
            return
        rs1, rs2 = self.classes[type(ins)]
        for attr, _, width, mx, _key in rs1:
            v = getattr(ins, attr)
            if not (0 <= v <= mx):
                raise _overflow(ins, attr, v, width)
        for attr, _, width, mx, to_f, _ in rs2:
            v = to_f(getattr(ins, attr))
            if not (0 <= v <= mx):
                raise _overflow(ins, attr, getattr(ins, attr), width)

    def encode(self, ins: Instr) -> tuple[int, int, int]:
        if isinstance(ins, CoreOp):
            raise EncodeError(f"{ins.describe()}: a core op runs on the core and has no accelerator encoding")
        try:
            rs1_spec, rs2_spec = self.classes[type(ins)]
        except KeyError:
            raise EncodeError(f"{ins!r} is not an instruction") from None
        self.check(ins)
        rs1 = 0
        for attr, shift, _, _, _ in rs1_spec:
            rs1 |= int(getattr(ins, attr)) << shift
        rs2 = 0
        for attr, shift, _, _, to_f, _ in rs2_spec:
            rs2 |= to_f(getattr(ins, attr)) << shift
        return FUNCT7[type(ins)], rs1, rs2

    def decode(self, funct7: int, rs1: int, rs2: int) -> Instr:
        try:
            cls = BY_FUNCT7[int(funct7)]
        except KeyError:
            raise EncodeError(f"funct7 {funct7} is not an instruction of this emulator "
                              f"(known: {sorted(BY_FUNCT7)})") from None
        rs1_spec, rs2_spec = self.classes[cls]
        kw: dict[str, Any] = {}
        for attr, shift, _, mx, _ in rs1_spec:
            kw[attr] = (int(rs1) >> shift) & mx
        for attr, shift, _, mx, _, from_f in rs2_spec:
            v = from_f((int(rs2) >> shift) & mx)
            kw[attr] = kw[attr] | v if attr in kw else v  # a field split in parts (Matmul dataflow)
        if cls is Mset and not kw["alloc"]:
            kw["col"] = 0
        if cls is Matmul:
            try:
                kw["dataflow"] = _DATAFLOW_BACK[kw["dataflow"]]
            except KeyError:
                raise EncodeError(f"MATMUL dataflow code {kw['dataflow']} is not a dataflow "
                                  f"(known: {_DATAFLOW})") from None
        return cls(**kw)


def _overflow(ins: Instr, attr: str, value: Any, width: int) -> EncodeError:
    return EncodeError(
        f"{ins.op}: field {attr} = {value} does not fit its {width}-bit field "
        f"(allowed 0..{(1 << width) - 1}) in {ins.describe()}",
        instruction=ins.op, field=attr, value=value, width=width)


_LAYOUTS: dict[int, Layout] = {}


def layout(chip) -> Layout:
    """The field layout for `chip` (cached per config object)."""
    key = id(chip)
    lay = _LAYOUTS.get(key)
    if lay is None or lay._chip is not chip:  # type: ignore[attr-defined]
        lay = Layout(chip)
        lay._chip = chip  # type: ignore[attr-defined]
        _LAYOUTS[key] = lay
    return lay


def encode(ins: Instr, chip) -> tuple[int, int, int]:
    """``(funct7, rs1, rs2)`` of an accelerator instruction under `chip`'s field widths."""
    return layout(chip).encode(ins)


def decode(funct7: int, rs1: int, rs2: int, chip) -> Instr:
    """The instruction that ``(funct7, rs1, rs2)`` encodes under `chip`'s field widths."""
    return layout(chip).decode(funct7, rs1, rs2)
