"""DMA charges for arrays of candidates: the emulator's one DMA model (`emulator.dma`)
fed each candidate's chip figures (`CandidateArrays`: beat bytes, beats a burst, bursts in
flight, latency)."""

from __future__ import annotations

import numpy as np

from emulator.dma import transfer_cycles


def dma_cycles(nbytes, beat_bytes, burst_beats, parallel_bursts, latency_cycles, col=1, strided=False):
    """Cycles of one MVIN / MVOUT moving `nbytes` (every argument broadcasts): whole beats,
    into bank rows of `col` physical banks, contiguous or one DRAM run a bank row."""
    beats = -(-np.asarray(nbytes, dtype=np.int64) // beat_bytes)
    return transfer_cycles(beats, col, strided, burst_beats, parallel_bursts, latency_cycles)


def bus_hold_cycles(cycles, nbytes, beat_bytes, burst_beats, parallel_bursts, latency_cycles, bus_bytes,
                    only_held: bool = False, sharers=1):
    """System-bus cycles one MVIN / MVOUT of `cycles` (its `dma_cycles`) moving `nbytes` keeps
    from other cores' bursts, as the emulator's bus (`emulator.timing.Bus`) places them: a
    transfer reserves its bursts when it starts, each in the first gap free for it. Between
    two of its bursts the bus is free while the next one's request travels (``latency_cycles``
    less the other bursts in flight). A burst of another core fits there only if it is no
    longer than that gap; else the transfer holds the bus from its first burst's data to
    its last (``cycles - latency_cycles``), not just for its bytes (``nbytes / bus_bytes``).
    `sharers`: how many other cores' bursts must fit one gap (default one). `only_held`: 0
    where they fit (the bus is shared, not held)."""
    beat_bytes = np.asarray(beat_bytes)
    occ = np.maximum(1, -(-(np.asarray(burst_beats) * beat_bytes) // bus_bytes))
    gap = np.asarray(latency_cycles) + np.asarray(burst_beats) - np.asarray(parallel_bursts) * occ
    nbytes = np.asarray(nbytes, dtype=np.int64)
    span = np.where(nbytes > 0, np.asarray(cycles) - latency_cycles, 0)
    share = 0 if only_held else -(-nbytes // bus_bytes)
    return np.where(np.asarray(sharers) * occ <= gap, share, np.maximum(span, -(-nbytes // bus_bytes)))


def dma_cycles_for(nbytes, chip, col=1, strided=False):
    """`dma_cycles` with one chip's figures."""
    return dma_cycles(nbytes, chip.dma.beat_bytes, chip.dma_burst_beats, chip.dma_parallel_bursts,
                      chip.dma.latency_cycles, col, strided)


def candidate_dma_cycles(params, nbytes, col=1, strided=False):
    """`dma_cycles` per candidate of `params` (arrays shaped like `nbytes` after broadcasting)."""
    return dma_cycles(nbytes, params.beat_bytes, params.burst_beats, params.parallel_bursts, params.dma_latency,
                      col, strided)


__all__ = ["bus_hold_cycles", "candidate_dma_cycles", "dma_cycles", "dma_cycles_for"]
