"""DRAM placement of a lowered graph: every tensor in a zero-padded buffer, and views of it.

Every tensor lives in its own buffer (never reused, so padding stays zero) whose last two
dimensions are padded to `PAD` (16, the matrix Ball's granule): a ``(..., R, C)`` tensor
occupies ``(..., pad(R), pad(C))`` row-major, and its logical value is a strided view of
that buffer. A matmul operand can then be tiled without a pad copy; the padding is zero
because no op writes it (ops write logical views only; the matmul epilogue multiplies
padding by a zero scale).

A matmul accumulator is *blocked*: ``(batch, Mt, Nt, tm, tn)`` int32, one contiguous tile
per output tile (what a col-4 accumulator bank holds, MVOUT'd with one contiguous
transfer). Its logical value is not a strided view; :meth:`Loc.padded_view` gives the
5-D view ``(batch, Mt, tm, Nt, tn)`` of the padded matrix, which elementwise consumers read.
"""

from __future__ import annotations

import hashlib
import math
import mmap
from dataclasses import dataclass, replace

import numpy as np

from emulator import DramTensor
from emulator.coreops import dram_view

from ..mapping.matmul import PAD

ALIGN = 64
NP_DTYPES = {"int8": np.int8, "int32": np.int32, "int64": np.int64, "float32": np.float32, "uint8": np.uint8,
             "int16": np.int16, "bool": np.bool_}
EMU_DTYPES = {"float32": "fp32"}


def pad(n: int, p: int = PAD) -> int:
    return -(-int(n) // p) * p


def padded_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    if len(shape) == 0:
        return ()
    if len(shape) == 1:
        return (pad(shape[0]),)
    return tuple(shape[:-2]) + (pad(shape[-2]), pad(shape[-1]))


def contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, acc = [], itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(int(n), 1)
    return tuple(reversed(strides))


def emu_dtype(dtype: str) -> str:
    return EMU_DTYPES.get(dtype, dtype)


def itemsize(dtype: str) -> int:
    return np.dtype(NP_DTYPES[dtype]).itemsize


@dataclass(frozen=True)
class Blocked:
    """A blocked accumulator: (batch, Mt, Nt, tm, tn) int32, contiguous."""

    batch: int
    Mt: int
    Nt: int
    tm: int
    tn: int
    M: int  # logical rows and columns of each batch entry
    N: int


@dataclass(frozen=True)
class Loc:
    """Where a tensor lives: its buffer (addr, padded shape) and logical shape."""

    addr: int
    shape: tuple[int, ...]
    dtype: str
    buffer_shape: tuple[int, ...]
    blocked: Blocked | None = None
    strides: tuple[int, ...] | None = None  # byte strides of the logical view (default: padded row-major)

    @property
    def isize(self) -> int:
        return itemsize(self.dtype)

    @property
    def nbytes(self) -> int:
        if self.blocked is not None:
            b = self.blocked
            return b.batch * b.Mt * b.Nt * b.tm * b.tn * self.isize
        return math.prod(self.buffer_shape) * self.isize

    def view(self) -> DramTensor:
        """The logical tensor as a strided DRAM view (not for blocked accumulators)."""
        if self.blocked is not None:
            raise ValueError("a blocked accumulator has no logical strided view")
        strides = self.strides or contiguous_strides(self.buffer_shape, self.isize)
        return DramTensor(self.addr, self.shape, emu_dtype(self.dtype), strides)

    @property
    def standard(self) -> bool:
        """A padded row-major buffer of its own shape (what a matmul operand needs)."""
        if self.blocked is not None or math.prod(self.buffer_shape) != math.prod(padded_shape(self.shape)):
            return False
        natural = contiguous_strides(padded_shape(self.shape), self.isize)
        return self.strides is None and self.buffer_shape == padded_shape(self.shape) or self.strides == natural

    def padded_view(self) -> DramTensor:
        """(batch, Mt, tm, Nt, tn) over the padded matrix (row-major or blocked)."""
        if self.blocked is not None:
            b, s = self.blocked, self.isize
            shape = (b.batch, b.Mt, b.tm, b.Nt, b.tn)
            strides = (b.Mt * b.Nt * b.tm * b.tn * s, b.Nt * b.tm * b.tn * s, b.tn * s, b.tm * b.tn * s, s)
            return DramTensor(self.addr, shape, emu_dtype(self.dtype), strides)
        raise ValueError("padded_view needs a tile grid; use padded_grid_view")

    def padded_grid_view(self, tm: int, tn: int) -> DramTensor:
        """A row-major padded matrix buffer (..., Mp, Np) seen as (batch, Mt, tm, Nt, tn)."""
        Mp, Np = self.buffer_shape[-2], self.buffer_shape[-1]
        batch = math.prod(self.buffer_shape[:-2])
        s = self.isize
        shape = (batch, Mp // tm, tm, Np // tn, tn)
        strides = (Mp * Np * s, tm * Np * s, Np * s, tn * s, s)
        return DramTensor(self.addr, shape, emu_dtype(self.dtype), strides)

    def read(self, img: np.ndarray, copy: bool = True) -> np.ndarray:
        """The logical value from a DRAM image; ``copy=False``: a view of the image where the
        layout allows (for a reader that only reads, before the image changes)."""
        if self.blocked is None:
            view = dram_view(img, self.view())
            return np.array(view) if copy else view
        b = self.blocked
        full = np.array(dram_view(img, self.padded_view())).reshape(b.batch, b.Mt * b.tm, b.Nt * b.tn)
        return full[:, :b.M, :b.N].reshape(self.shape)


def content_key(array: np.ndarray) -> tuple:
    """What makes two read-only arrays interchangeable: shape, dtype and bytes (sha256)."""
    data = np.ascontiguousarray(array)
    return tuple(data.shape), data.dtype.str, hashlib.sha256(data.view(np.uint8).reshape(-1).data).hexdigest()


class Dram:
    """A bump allocator over the DRAM image, with an initial-contents buffer."""

    def __init__(self):
        self.top = 0
        # initial contents, written into the image only when it is made (`image`): an array
        # (C-contiguous, kept, not copied to bytes) or a deferred array (`shape`, `nbytes`,
        # ``write(out)``: a blocked weight's tiles, `dse.units.matrix.BlockedBt`)
        self.chunks: list[tuple[int, object]] = []
        self.constants: dict[tuple, int] = {}  # (scope, *a read-only constant's key) -> its address
        # Constants are bound within a scope: one graph's lowering (one request of a layered
        # placement, one stage of a staged workload), as the model costs one graph.
        self.scope: object = None
        # A staged workload's lowering (several graphs, one image): read-only tensors and
        # constants bound by their bytes across the graphs, the stages' same weights placed
        # once (`content_key`); the model counts them alike (`dse.analytical.placed.bound_across_stages`).
        self.bind_content = False
        self._by_content: dict[tuple, Loc] = {}
        # buffers that are no graph tensor, (addr, bytes, what), for a listing of where things are
        self.named: list[tuple[int, int, str]] = []
        self.label = ""  # the op placing buffers now (set by the lowering): an unnamed one is its

    def alloc(self, nbytes: int, name: str = "") -> int:
        addr = self.top
        self.top = pad(addr + max(int(nbytes), 1), ALIGN)
        if name:
            self.named.append((addr, int(nbytes), name))
        return addr

    def tensor(self, shape, dtype: str, value: np.ndarray | None = None, name: str = "") -> Loc:
        shape = tuple(int(s) for s in shape)
        bshape = padded_shape(shape)
        loc = Loc(0, shape, dtype, bshape)
        addr = self.alloc(loc.nbytes, name)
        loc = Loc(addr, shape, dtype, bshape)
        if value is not None:
            buf = np.zeros(bshape, dtype=NP_DTYPES[dtype])
            buf[tuple(slice(0, n) for n in shape)] = np.asarray(value).astype(NP_DTYPES[dtype], copy=False)
            self.chunks.append((addr, buf))
        return loc

    def blob(self, array, name: str = "") -> int:
        """Store a constant array (kept C-contiguous as it is: not to be changed after) or a
        deferred one (``nbytes``, ``write(out)``) and return its address."""
        data = array if hasattr(array, "write") else np.ascontiguousarray(array)
        addr = self.alloc(data.nbytes, name or (f"{self.label}: constant" if self.label else ""))
        self.chunks.append((addr, data))
        return addr

    def constant(self, key: tuple, array: np.ndarray, name: str = "") -> int:
        """A read-only constant's address: placed once per `key` (a weight's name and its
        blocked layout; the frontend gave byte-identical weights one name), every later use
        bound to that copy with its own offsets into it, within the current `scope`. The
        model counts it once likewise (`dse.units.matrix.bound_bytes`)."""
        if self.bind_content:  # bound by its bytes: a deferred array made now
            array = array.array() if hasattr(array, "write") else array
            key = ("content", *content_key(array))
        else:
            key = (self.scope, *key)
        if key not in self.constants:
            self.constants[key] = self.blob(array, name)
        return self.constants[key]

    def weight(self, shape, dtype: str, value) -> Loc:
        """A graph weight's buffer: its own, or with `bind_content` the one an identical weight
        (same shape, dtype and bytes) of any graph of this image has."""
        if not self.bind_content:
            return self.tensor(shape, dtype, value)
        key = (tuple(int(s) for s in shape), dtype, *content_key(np.asarray(value).astype(NP_DTYPES[dtype], copy=False)))
        if key not in self._by_content:
            self._by_content[key] = self.tensor(shape, dtype, value)
        return self._by_content[key]

    def matrix(self, shape, dtype: str, nb: int, M: int, N: int) -> Loc:
        """A tensor of `shape` (nb x M rows of N, row-major) in a (nb, pad(M), pad(N)) buffer:
        what an elementwise epilogue of a blocked accumulator writes."""
        shape = tuple(int(s) for s in shape)
        bshape = (nb, pad(M), pad(N))
        s = itemsize(dtype)
        addr = self.alloc(math.prod(bshape) * s)
        if nb == 1:
            lead = contiguous_strides(shape[:-1], bshape[2] * s)
            strides = tuple(lead) + (s,)
        else:  # (..., M, N) with the batch dims in front
            strides = contiguous_strides(shape[:-2], bshape[1] * bshape[2] * s) + (bshape[2] * s, s)
        return Loc(addr, shape, dtype, bshape, None, strides)

    def place(self, planned: Loc, blocked: Blocked | None = None) -> Loc:
        """A buffer of the geometry the plan gave a result (`OpPlan.writes`: shape, buffer,
        strides, layout), at the next address; a product's accumulator in the candidate's
        tiles (`blocked`). The plan places without data and without the candidate's own
        buffers (packed operands, tiles), so its addresses are placement-only; its geometry
        is the one the lowering places."""
        loc = replace(planned, addr=0, blocked=blocked or planned.blocked)
        return replace(loc, addr=self.alloc(loc.nbytes))

    def blocked(self, shape, blocked: Blocked) -> Loc:
        loc = Loc(0, tuple(shape), "int32", (), blocked)
        return Loc(self.alloc(loc.nbytes), tuple(shape), "int32", (), blocked)

    def image(self) -> np.ndarray:
        """The initial image: zeros (an anonymous mapping of its own, so that a run that has
        done with a buffer can give its pages back: `release_pages`) with every chunk written."""
        size = pad(self.top, ALIGN)
        # private: given-back pages of a shared mapping would stay in its memory object, only unmapped
        img = np.frombuffer(_huge_mapping(size), dtype=np.uint8) if size else np.zeros(0, dtype=np.uint8)
        for addr, data in self.chunks:
            if hasattr(data, "write"):
                data.write(img[addr:addr + data.nbytes])
            elif data.nbytes:
                img[addr:addr + data.nbytes] = data.reshape(-1).view(np.uint8)
        return img


def _huge_mapping(size: int) -> mmap.mmap:
    """An anonymous private mapping of `size` bytes, advised to take huge pages, as numpy's
    own large arrays and torch's (``THP_MEM_ALLOC_ENABLE``, `dse emulate`) are: a run's
    released 4 KB pages would otherwise leave the free memory in pieces, and the next
    layer's frontend pays for the kernel's compaction of them (its system time tripled)."""
    owner = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        owner.madvise(mmap.MADV_HUGEPAGE)
    return owner


def release_pages(img: np.ndarray, lo: int, hi: int) -> int:
    """Give the pages wholly inside bytes [lo, hi) of an image made by `Dram.image` back to
    the system (madvise MADV_DONTNEED: they read as zeros after, and take no memory until
    written again); the pages at either end, shared with a neighbour, stay. Returns the bytes
    given back: 0 for an image that is no mapping of its own (a copy, a slice)."""
    owner = img.base.obj if isinstance(img.base, memoryview) else None
    if not isinstance(owner, mmap.mmap) or img.ndim != 1 or img.size != len(owner):
        return 0
    page = mmap.PAGESIZE
    start, end = -(-max(lo, 0) // page) * page, min(hi, img.size) // page * page
    if end <= start:
        return 0
    owner.madvise(mmap.MADV_DONTNEED, start, end - start)
    return end - start
