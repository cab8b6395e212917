"""Each op's output checked at the BARRIER that closes it, during the emulator's run, and the
DRAM buffers nothing reads any more given back to the system.

Every graph tensor has a DRAM buffer of its own, never reused (`dse.plan.memory`), so a run
that only checks its values at the end holds every one of them: a Llama-3-8B-shaped layer's
image at seq 2048 is 5.7 GB, its attention scores 512 MB a tensor. Instead, the emulator
calls `BoundaryCheck` after each barrier epoch (`emulator.Machine.run`): every op whose
output no later instruction writes is compared with its reference then, in graph order (the
streamed reference is asked in op order: `StreamedReference`), and every buffer whose last
reader has run and whose values are compared has the pages wholly inside it released
(`release_pages`). The graph's outputs stay, and so does every buffer they share a page with.

Which instruction touches which bytes, and in which epoch, is read off the program itself
(MVIN reads, MVOUT writes, a core op reads its sources and writes its destination), not from
the graph, so the lowering's own buffers (packed operands, Bt tiles, copies) go too, and an
op's output is compared as the last write into it left it: the same bits the final image
holds. The program and the image are not changed: its digest and its cycles are today's.
"""

from __future__ import annotations

import time

import numpy as np

from emulator.coreops import dram_extent
from emulator.dram_access import dram_accesses

from ..plan.memory import release_pages
from ..workload.graph import Graph
from . import OpCheck, check_op


def op_ends(lowered) -> list[int]:
    """Of a one-core program, the pcs where the next op's instructions begin (`Lowered.labels`):
    its run's cuts (`emulator.Machine.run`); none for several cores (their BARRIERs close ops)."""
    if len(lowered.program.cores) != 1:
        return []
    labels = [lowered.labels.get(id(ins)) for ins in lowered.program.cores[0]]
    return [pc for pc in range(1, len(labels)) if labels[pc] != labels[pc - 1]]


def dram_touches(program, chip, cuts=()) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every DRAM access of `program`'s instructions (`emulator.dram_access`): byte ranges
    [lo, hi), the epoch each runs in and whether it writes."""
    touches = dram_accesses(program, chip, cuts)
    if not touches:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, np.zeros(0, dtype=bool)
    _, _, epoch, write, lo, hi, _, _ = zip(*touches)
    return (np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64), np.asarray(epoch, dtype=np.int64),
            np.asarray(write, dtype=bool))


def value_extent(lowered, name: str) -> tuple[int, int]:
    """The bytes a tensor's check reads (`Lowered.read`; a blocked accumulator by its tiles)."""
    loc = lowered.locs[name]
    return dram_extent(loc.padded_view() if loc.blocked is not None else loc.view())


class BoundaryCheck:
    """`emulator.run`'s ``boundary``: the graph's op checks (`check_op`) at the epochs that
    close them, and the release of the image's dead buffers. `finish` gives the checks, in
    graph order, as `dse.numerics.compare` makes them from the final image."""

    def __init__(self, graph: Graph, lowered, image: np.ndarray, reference, chip):
        self.graph, self.lowered, self.image, self.reference = graph, lowered, image, reference
        self.ops = [op for op in graph.ops if op.outputs[0] not in lowered.fused]
        self.checks: list[OpCheck] = []
        self.released = 0  # bytes given back
        self.seconds = 0.0  # time in the boundaries (checks and releases), not the emulator's
        self.cuts = op_ends(lowered)  # a one-core program's op ends (several cores: their BARRIERs)
        lo, hi, epoch, write = dram_touches(lowered.program, chip, self.cuts)
        # each op is checked once the last write into what it reads has run (epoch 0 at the
        # earliest: a value no instruction writes is checked at the first boundary)
        extents = [value_extent(lowered, op.outputs[0]) for op in self.ops]
        w_lo, w_hi, w_epoch = lo[write], hi[write], epoch[write]
        self.due = [int(w_epoch[(w_lo < b) & (w_hi > a)].max(initial=0)) for a, b in extents]
        # Buffers: runs of overlapping touches (an instruction's, a check's at its epoch);
        # each may go once the last of them has run and its values are checked.
        n_touch = lo.size
        lo = np.concatenate([lo, np.asarray([a for a, _ in extents], dtype=np.int64)])
        hi = np.concatenate([hi, np.asarray([b for _, b in extents], dtype=np.int64)])
        epoch = np.concatenate([epoch, np.asarray(self.due, dtype=np.int64)])
        order = np.argsort(lo, kind="stable")
        lo, hi, epoch = lo[order], hi[order], epoch[order]
        reach = np.maximum.accumulate(hi) if hi.size else hi
        starts = np.flatnonzero(np.concatenate([[True], lo[1:] >= reach[:-1]])) if lo.size else np.zeros(0, np.int64)
        first = np.zeros(lo.size, dtype=bool)
        first[starts] = True
        group_of = np.cumsum(first) - 1
        self.g_lo = lo[starts] if lo.size else lo
        self.g_hi = np.maximum.reduceat(hi, starts) if lo.size else hi
        g_end = np.maximum.reduceat(epoch, starts) if lo.size else epoch
        # checks outstanding per buffer; op k's check is touch n_touch + k
        self.waiting = np.zeros(self.g_lo.size, dtype=np.int64)
        self.group_of_op = np.empty(len(self.ops), dtype=np.int64)
        position = np.empty(lo.size, dtype=np.int64)
        position[order] = np.arange(lo.size)
        for k in range(len(self.ops)):
            g = group_of[position[n_touch + k]]
            self.group_of_op[k] = g
            self.waiting[g] += 1
        # the graph's outputs (and the program's) are read after the run: their buffers stay
        kept = [value_extent(lowered, n) for n in graph.outputs if n in lowered.locs]
        kept += [(r.addr, r.end) for r in lowered.program.outputs.values()]
        keep = np.zeros(self.g_lo.size, dtype=bool)
        for a, b in kept:
            keep |= (self.g_lo < b) & (self.g_hi > a)
        self.by_end = [int(g) for g in np.argsort(g_end, kind="stable") if not keep[g]]  # by their last touch
        self.g_end = g_end
        self.next_end = 0
        self.ended: list[int] = []  # buffers past their last touch, waiting for their checks
        # bytes no instruction and no check touches (weights read only through their tiles'
        # copy, inputs of a view): given back at the first boundary
        self.untouched = _gaps(self.g_lo, self.g_hi, image.size, kept)
        self.next_op = 0

    def __call__(self, epoch: int) -> None:
        started = time.perf_counter()
        self._boundary(epoch)
        self.seconds += time.perf_counter() - started

    def _boundary(self, epoch: int) -> None:
        if self.untouched:
            for a, b in self.untouched:
                self.released += release_pages(self.image, a, b)
            self.untouched = []
        by_end, g_end = self.by_end, self.g_end
        while self.next_end < len(by_end) and g_end[by_end[self.next_end]] <= epoch:
            self.ended.append(by_end[self.next_end])
            self.next_end += 1
        # what is done with goes before the checks' references are computed (an attention's
        # accumulator and its scale constant, beside the scores the next check reads), then
        # what the checks let go
        self._release()
        ops, due = self.ops, self.due
        while self.next_op < len(ops) and due[self.next_op] <= epoch:  # in graph order: the reference streams
            k = self.next_op
            self.checks.append(check_op(ops[k], self.graph, self.lowered, self.image, self.reference))
            self.waiting[self.group_of_op[k]] -= 1
            self.next_op += 1
        self._release()

    def _release(self) -> None:
        """Give back every buffer past its last touch whose values are all checked."""
        still = []
        for g in self.ended:
            if self.waiting[g]:
                still.append(g)
            else:
                self.released += release_pages(self.image, int(self.g_lo[g]), int(self.g_hi[g]))
        self.ended = still

    def finish(self) -> list[OpCheck]:
        """Every op's check in graph order (those the run's boundaries left, on the final image)."""
        while self.next_op < len(self.ops):
            self.checks.append(check_op(self.ops[self.next_op], self.graph, self.lowered, self.image,
                                        self.reference))
            self.next_op += 1
        return self.checks


def _gaps(g_lo: np.ndarray, g_hi: np.ndarray, size: int, kept: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The byte ranges of [0, size) outside every buffer and every kept range."""
    spans = sorted([(int(a), int(b)) for a, b in zip(g_lo, g_hi)] + list(kept))
    gaps, at = [], 0
    for a, b in spans:
        if a > at:
            gaps.append((at, a))
        at = max(at, b)
    if at < size:
        gaps.append((at, size))
    return gaps
