"""What the model charges an op, for arrays of candidates: `OpCost` (one op's figures) and
`Charges` (a walk's running sums, with the Ball path and the core path chosen per
candidate). Read by the graph walk (`graph_cost`) and the Ball streams' costs
(`stream_cost`) alike."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class OpCost:
    """One op's figures for every candidate (arrays of length n)."""

    unit: np.ndarray
    feasible: np.ndarray
    reason: np.ndarray
    cycles: np.ndarray
    compute_cycles: np.ndarray  # Ball busy (matrix or stream Ball) on the busiest worker
    dma_cycles: np.ndarray
    core_cycles: np.ndarray  # core ops on the busiest worker
    ball_cycles: np.ndarray  # Ball work with its transfers (matrix tiles, Ball streams)
    busy_cycles: np.ndarray  # core + Ball work summed over all workers (per-core busy time)
    syncs: np.ndarray  # FENCEs / BARRIERs that close the op's parts
    dma_bytes: np.ndarray
    sram_bytes: np.ndarray  # private SRAM the op allocates (per worker)
    shared_bytes: np.ndarray  # shared memory a tile of cores holds for the op (mapping.weights = shared)
    bank_rows: np.ndarray  # of it, the bank rows that hold data
    banks: np.ndarray
    tile_m: np.ndarray
    tile_n: np.ndarray
    tile_k: np.ndarray
    workers_used: np.ndarray
    preload_cycles: np.ndarray  # of `cycles`, a shared weight's loads before its BARRIER
    # What the op makes the chip do, summed over every worker (`dse.ppa` prices it): the
    # matrix Ball's MACs, bank rows read and written (private, shared memory), the stream
    # Ball's busy cycles (its kind: `unit`) and the core's cycles in core ops.
    ball_macs: np.ndarray
    bank_reads: np.ndarray
    bank_writes: np.ndarray
    shared_reads: np.ndarray
    shared_writes: np.ndarray
    stream_busy: np.ndarray
    core_busy: np.ndarray
    workspace_bytes: np.ndarray  # DRAM the lowering lays out for the op beyond the plan's tensors


# The OpCost fields that count activity, summed over workers (and over a span's workers).
ACTIVITY_FIELDS = ("ball_macs", "bank_reads", "bank_writes", "shared_reads", "shared_writes", "stream_busy",
                   "core_busy")


@dataclass
class Charges:
    """One op's charges, accumulated as the walk meets its parts (arrays of length n).
    The Ball-side figures are None until a Ball path sets them."""

    n: int
    core: np.ndarray = field(init=False)  # on the busiest worker
    ball: np.ndarray = field(init=False)
    dma: np.ndarray = field(init=False)
    syncs: np.ndarray = field(init=False)
    busy: np.ndarray = field(init=False)  # summed over workers
    ball_busy: np.ndarray | None = None  # the Ball's own busy cycles on the busiest worker
    banks: np.ndarray | None = None
    bank_rows: np.ndarray | None = None
    sram: np.ndarray | None = None
    dma_bytes: np.ndarray | None = None

    # activity summed over workers (`OpCost.ACTIVITY_FIELDS`)
    ball_macs: np.ndarray = field(init=False)
    bank_reads: np.ndarray = field(init=False)
    bank_writes: np.ndarray = field(init=False)
    shared_reads: np.ndarray = field(init=False)
    shared_writes: np.ndarray = field(init=False)
    stream_busy: np.ndarray = field(init=False)
    core_busy: np.ndarray = field(init=False)
    workspace_bytes: np.ndarray = field(init=False)  # DRAM the lowering lays out beyond the plan

    BALL_FIGURES = ("ball_busy", "banks", "bank_rows", "sram", "dma_bytes")
    TIMES = ("core", "ball", "dma", "syncs", "busy") + ACTIVITY_FIELDS + ("workspace_bytes",)

    def __post_init__(self):
        self.core, self.ball, self.dma, self.busy = (np.zeros(self.n) for _ in range(4))
        self.syncs = np.zeros(self.n, dtype=np.int64)
        for name in ACTIVITY_FIELDS + ("workspace_bytes",):
            setattr(self, name, np.zeros(self.n))

    def add(self, other: "Charges") -> None:
        for f in self.TIMES:
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def select(self, on_ball: np.ndarray, ball: "Charges", core: "Charges") -> None:
        """Per candidate, the Ball path's charges where `on_ball`, else the core path's."""
        for f in self.TIMES:
            setattr(self, f, getattr(self, f) + np.where(on_ball, getattr(ball, f), getattr(core, f)))
        for f in self.BALL_FIGURES:
            value = getattr(ball, f)
            if value is not None:
                setattr(self, f, np.where(on_ball, value, 0))
