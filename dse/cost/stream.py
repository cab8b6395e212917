"""The cost of a Ball stream (an elementwise op streamed through two private banks: per
piece MVIN, Ball op, MVOUT), as the emulator's serial timing runs it; for one chip, or for
arrays of candidates that share the stream and differ in DMA figures and MSET cost."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from emulator.dma import transfer_cycles

from .dma import bus_hold_cycles


def strided(chip, col: int, stride: int) -> bool:
    """A transfer with row stride `stride` bytes (0: contiguous) into a bank of `col`
    physical banks is one DRAM run a bank row unless the stride is the bank row width."""
    return stride not in (0, col * chip.banks.row_bytes)


@dataclass(frozen=True)
class StreamFigures:
    """The chip figures a stream's time reads besides its pieces and Ball: scalars for one
    chip, or arrays with one entry a candidate."""

    burst_beats: object
    parallel_bursts: object
    latency_cycles: object
    mset_cycles: object
    beat_bytes: object = 16
    bus_bytes: object = 16  # dma.system_bus_bytes

    @classmethod
    def of(cls, chip) -> "StreamFigures":
        return cls(chip.dma_burst_beats, chip.dma_parallel_bursts, chip.dma.latency_cycles,
                   chip.front_end.mset_cycles, chip.dma.beat_bytes, chip.dma.system_bus_bytes)

    def dma(self, lines: int, col: int, is_strided: bool):
        return transfer_cycles(lines, col, is_strided, self.burst_beats, self.parallel_bursts, self.latency_cycles)


def worker_share_list(chip, stream, workers: int) -> list[tuple[tuple, tuple]]:
    """Each working worker's share of the stream in worker order (worker w takes pieces w,
    w + workers, ...) as the sizes its time depends on: ((in_lines, count), ...) and
    ((out_lines, strided, count), ...)."""
    workers = max(1, workers)
    out = []
    for w in range(workers):
        mine = stream.pieces[w::workers]
        if not mine:
            continue
        ins = Counter(p.in_lines for p in mine)
        outs = Counter((p.out_lines, strided(chip, stream.dst_col, p.dst_stride)) for p in mine)
        out.append((tuple(sorted(ins.items())), tuple(sorted(outs.items()))))
    return out


def worker_shares(chip, stream, workers: int) -> list[tuple[tuple, tuple]]:
    """`worker_share_list` with workers of the same sizes once each."""
    return list(dict.fromkeys(worker_share_list(chip, stream, workers)))


def worker_cycles(chip, stream, workers: int, figures: StreamFigures | None = None, shares=None) -> list:
    """Serial cycles of each distinct worker share of the stream (`worker_shares`, or the
    `shares` given): ``4 x mset_cycles`` plus, per piece, ``dma(in_lines) + Ball
    latency(iter = in_lines) + dma(out_lines, dst_col, dst_stride)``. `chip` gives the Ball
    and the bank row width; `figures` (default: the chip's) the rest."""
    figures = figures or StreamFigures.of(chip)
    ball = chip.ball(stream.kind).latency_formula("default")
    out = []
    for ins, outs in (shares if shares is not None else worker_shares(chip, stream, workers)):
        total = 4 * np.asarray(figures.mset_cycles, dtype=np.int64)
        for lines, count in ins:
            total = total + count * (figures.dma(lines, stream.src_col, False) + int(ball.cycles(iter=lines)))
        for (lines, is_strided), count in outs:
            total = total + count * figures.dma(lines, stream.dst_col, is_strided)
        out.append(total)
    return out


def stream_cycles(chip, stream, workers: int = 1, figures: StreamFigures | None = None, shares=None):
    """Serial cycles of a stream (`dse.plan.streams.Stream`) on its slowest worker: exactly
    the emulator's ``serial`` time of that worker's stream (the overlapped timing overlaps
    a piece's Ball op with the next piece's transfers). An int for one chip; an array when
    `figures` holds arrays."""
    per_worker = worker_cycles(chip, stream, workers, figures, shares)
    worst = np.max(np.stack(np.broadcast_arrays(*per_worker)), axis=0) if per_worker else 0
    return int(worst) if np.ndim(worst) == 0 else worst


def contended_stream_cycles(chip, stream, workers: int, figures: StreamFigures | None = None, shares=None):
    """`stream_cycles` of a stream the workers run at once on the system bus, the overlapped
    timing's bus order: every worker starts with its first piece's MVIN. Where a burst is
    longer than the gap a transfer's DMA leaves between its bursts (`bus_hold_cycles`), those
    first loads go on the bus one after another (core order), so worker j starts its stream
    the first loads of workers 0..j-1 late (less their latency, which overlaps); where
    bursts fit the gaps they share the bus and nobody waits. Nor can the stream end before
    the bus has carried every piece's held transfers, one after another. `shares`:
    `worker_share_list`."""
    figures = figures or StreamFigures.of(chip)
    order = shares if shares is not None else worker_share_list(chip, stream, workers)
    unique = list(dict.fromkeys(order))
    per_share = worker_cycles(chip, stream, workers, figures, unique)
    if not per_share:
        return 0
    cycles = [per_share[unique.index(key)] for key in order]

    def held(lines, col, is_strided):
        d = figures.dma(lines, col, is_strided)
        return bus_hold_cycles(d, lines * figures.beat_bytes, figures.beat_bytes, figures.burst_beats,
                               figures.parallel_bursts, figures.latency_cycles, figures.bus_bytes, only_held=True)

    wait = 0
    worst = cycles[0]
    for j in range(1, len(order)):
        wait = wait + held(stream.pieces[j - 1].in_lines, stream.src_col, False)
        worst = np.maximum(worst, cycles[j] + wait)
    if len(order) > 1:  # and every piece's transfers one after another: the bus's own bound
        sizes = Counter((p.in_lines, p.out_lines, strided(chip, stream.dst_col, p.dst_stride)) for p in stream.pieces)
        total = sum(n * (held(i, stream.src_col, False) + held(o, stream.dst_col, st))
                    for (i, o, st), n in sizes.items())
        worst = np.maximum(worst, figures.latency_cycles + total)
    return int(worst) if np.ndim(worst) == 0 else worst


def ball_busy_cycles(chip, stream, workers: int = 1) -> int:
    """The Ball's own busy cycles on worker 0 (pieces 0, workers, 2 x workers, ...)."""
    ball = chip.ball(stream.kind).latency_formula("default")
    return sum(int(ball.cycles(iter=p.in_lines)) for p in stream.pieces[::max(1, workers)])


__all__ = ["StreamFigures", "ball_busy_cycles", "contended_stream_cycles", "stream_cycles", "strided", "worker_cycles",
           "worker_share_list", "worker_shares"]
