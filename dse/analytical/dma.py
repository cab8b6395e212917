"""DMA time: 16-byte beats, bursts of at most burst_max_bytes, a fixed latency per burst."""

from __future__ import annotations

import numpy as np


def dma_cycles(nbytes, beat_bytes, burst_max_bytes, bursts_in_flight, latency_cycles):
    """Cycles to move `nbytes` in one MVIN/MVOUT (every argument broadcasts).

    Bursts pay the DRAM latency, `bursts_in_flight` of them overlapping; beats stream at
    one per cycle behind them.
    """
    nbytes = np.asarray(nbytes, dtype=np.int64)
    beats = -(-nbytes // beat_bytes)
    bursts = -(-nbytes // burst_max_bytes)
    return -(-bursts // bursts_in_flight) * latency_cycles + beats


def dma_cycles_for(nbytes, dma):
    """`dma_cycles` with the figures of one chip's `Dma` config."""
    return dma_cycles(nbytes, dma.beat_bytes, dma.burst_max_bytes, dma.bursts_in_flight, dma.latency_cycles)
