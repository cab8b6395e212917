"""The DMA model: how one MVIN / MVOUT is cut into DRAM bursts and how long it takes.

One definition for every consumer: the emulator's bank model charges each transfer with
it, and the plan and the cost model call the same functions on numpy arrays (one entry a
candidate or a transfer). A transfer moves `lines` 16-byte beats between DRAM and a bank
of `col` physical banks. Every contiguous DRAM run is cut into bursts of at most
``burst_beats`` beats: a contiguous transfer is one run; a strided one (row stride other
than the bank row width) is one run a bank row (``col`` beats, the last row the rest).
At most ``parallel_bursts`` bursts are in flight (``min(dma.bursts_in_flight,
dma.inflight_requests)``), each paying ``dma.latency_cycles``; beats stream one a cycle
behind them. The system bus a tile's cores share is the timing model's (`emulator.timing`).
"""

from __future__ import annotations

import numpy as np


def burst_groups(nrows: int, last: int, col: int, contiguous: bool, burst_beats: int) -> tuple[tuple[int, int], ...]:
    """The bursts of one transfer as groups ``(count, beats a burst)``: `nrows` bank rows of
    `col` beats, the last one `last` beats."""
    if contiguous or nrows <= 1:
        runs = [(1, (nrows - 1) * col + last)] if nrows else []
    else:
        runs = [(nrows - 1, col), (1, last)]
    groups = []
    for count, beats in runs:
        if beats <= 0 or count <= 0:
            continue
        full, rem = divmod(beats, burst_beats)
        if full:
            groups.append((count * full, burst_beats))
        if rem:
            groups.append((count, rem))
    return tuple(groups)


def bursts(lines, col, strided, burst_beats):
    """DRAM bursts of a transfer of `lines` beats into `col`-wide bank rows (every argument
    broadcasts; `strided`: one DRAM run a bank row)."""
    if strided is False:  # one contiguous run: the common case, without the per-row arrays
        return -(-np.asarray(lines, dtype=np.int64) // burst_beats)
    lines, col = np.asarray(lines, dtype=np.int64), np.asarray(col, dtype=np.int64)
    nrows = -(-lines // col)
    last = lines - (nrows - 1) * col
    per_row = (nrows - 1) * -(-col // burst_beats) + -(-last // burst_beats)
    whole = -(-lines // burst_beats)
    return np.where(np.asarray(strided) & (nrows > 1), per_row, whole)


def transfer_cycles(lines, col, strided, burst_beats, parallel_bursts, latency_cycles):
    """Latency of one MVIN / MVOUT on an idle bus: ``ceil(bursts / parallel_bursts) *
    latency_cycles + lines`` (0 for an empty transfer). Every argument broadcasts."""
    n = bursts(lines, col, strided, burst_beats)
    cycles = -(-n // parallel_bursts) * latency_cycles + lines
    if isinstance(lines, (int, np.integer)):
        return cycles if lines > 0 else 0 * cycles
    return np.where(np.asarray(lines) > 0, cycles, 0)
