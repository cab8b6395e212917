"""Which DRAM bytes each instruction of a program touches, and in which epoch: the one static
walk over a program's accesses, read by the prefault helper (`emulator.prefault`: the chunks
a run will write) and by the op-boundary checks (`dse.numerics.boundary`: when a buffer is
last read or written).

An MVIN reads and an MVOUT writes rows of its bank's width (`Machine._dma_geometry`: a
private bank allocated `col` wide has rows of `col` rows' bytes, a shared bank rows of the
shared memory's width), `stride` bytes apart; a core op reads its sources' views and writes
its destination's (`coreops.dram_extent`). An epoch is what `Machine.run` runs between two
boundaries: a core's BARRIERs, and for a one-core program the `cuts` that end its ops.
"""

from __future__ import annotations

from .coreops import dram_extent
from .isa import Barrier, CoreOp, Mset, Mvin, Mvout

# (core, pc, epoch, writes, lo, hi, stride, width): bytes [lo, hi) hold the access; a DMA
# transfer touches rows of `width` bytes starting every `stride` bytes from lo (the last one
# ends at hi), a core op's view is one span (stride = width = hi - lo)
Access = tuple[int, int, int, bool, int, int, int, int]


def dram_accesses(program, chip, cuts=()) -> list[Access]:
    """Every DRAM access of `program` with a byte in it, core by core in program order."""
    rb = chip.banks.row_bytes
    sm = chip.shared_memory
    shared = range(sm.first_bank_id, sm.first_bank_id + sm.banks) if sm.enabled else range(0)
    ends = set(cuts)
    out: list[Access] = []
    append = out.append
    for c, instrs in enumerate(program.cores):
        cols: dict[int, int] = {}  # virtual bank -> its MSET's col, as the machine allocates it
        epoch = 0
        for pc, ins in enumerate(instrs):
            if pc in ends and type(instrs[pc - 1]) is not Barrier:  # a cut the BARRIER before made already
                epoch += 1
            kind = type(ins)
            if kind is Barrier:
                epoch += 1
            elif kind is Mset:
                if ins.alloc:
                    cols[ins.bank] = ins.col
            elif kind is Mvin or kind is Mvout:
                if ins.bank in shared:
                    col, width = 1, sm.row_bytes
                else:
                    col = cols.get(ins.bank, 1)
                    width = col * rb
                nrows = -(-ins.iter // col)
                if nrows:
                    last = ins.iter - (nrows - 1) * col
                    stride = ins.stride or width
                    append((c, pc, epoch, kind is Mvout, ins.addr, ins.addr + (nrows - 1) * stride + last * rb,
                            stride, width))
            elif kind is CoreOp:
                for t in ins.srcs:
                    lo, hi = dram_extent(t)
                    if hi > lo:
                        append((c, pc, epoch, False, lo, hi, hi - lo, hi - lo))
                if ins.dst is not None:
                    lo, hi = dram_extent(ins.dst)
                    if hi > lo:
                        append((c, pc, epoch, True, lo, hi, hi - lo, hi - lo))
    return out
