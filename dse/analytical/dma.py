"""DMA time: 16-byte beats, bursts of at most burst_max_bytes, a fixed latency per burst."""

from __future__ import annotations

import numpy as np

from emulator.chip import Dma


def dma_cycles(nbytes, dma: Dma):
    """Cycles to move `nbytes` (scalar or array) in one MVIN/MVOUT.

    Bursts pay the DRAM latency, `bursts_in_flight` of them overlapping; beats stream at
    one per cycle behind them.
    """
    nbytes = np.asarray(nbytes, dtype=np.int64)
    beats = -(-nbytes // dma.beat_bytes)
    bursts = -(-nbytes // dma.burst_max_bytes)
    return -(-bursts // dma.bursts_in_flight) * dma.latency_cycles + beats
