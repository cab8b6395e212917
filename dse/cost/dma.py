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


def dma_cycles_for(nbytes, chip, col=1, strided=False):
    """`dma_cycles` with one chip's figures."""
    return dma_cycles(nbytes, chip.dma.beat_bytes, chip.dma_burst_beats, chip.dma_parallel_bursts,
                      chip.dma.latency_cycles, col, strided)


def candidate_dma_cycles(params, nbytes, col=1, strided=False):
    """`dma_cycles` per candidate of `params` (arrays shaped like `nbytes` after broadcasting)."""
    return dma_cycles(nbytes, params.beat_bytes, params.burst_beats, params.parallel_bursts, params.dma_latency,
                      col, strided)


__all__ = ["candidate_dma_cycles", "dma_cycles", "dma_cycles_for"]
