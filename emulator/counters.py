"""Counters: compact, named evidence, each with a unit, a scope and the event it counts.

Every value is a :class:`Counter` row: ``name``, ``value``, ``unit``, ``scope`` (one of
``chip``, ``core``, ``ball``, ``bank``, ``channel``, ``host``) and ``where`` (the scope's
coordinates: ``core``, ``ball``, ``bank``, ``tile``, ``channel``). :data:`CATALOGUE`
documents each name. Emulated cycles and host seconds are different evidence kinds and
never share a name: host time is only in the ``host_*`` counters.

``busy_cycles`` + ``idle_cycles`` = ``cycles`` for every core. The ``stall_*`` counters
are *instruction-cycles*: each instruction's wait, attributed to its binding cause, summed
over instructions; waits of different instructions overlap in time, so they do not add up
to the core's cycles.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterator


@dataclass(frozen=True)
class CounterSpec:
    name: str
    unit: str
    scope: str
    event: str
    # What counting it costs the emulator in host time (`OVERHEAD`): a counter whose cost
    # grows with the program can slow one schedule more than another, which is not the chip's.
    overhead: str = ""


# The emulator's host-time overhead of keeping a counter, one of these.
AT_THE_END = "none while running: computed once after the run from state the passes keep anyway"
FUNCTIONAL_ADD = "one integer addition per counted instruction in the functional pass"
TIMING_ADD = "one integer addition per counted instruction in the timing pass"
INTERVALS = ("one interval kept per counted instruction in the timing pass, merged once after the run "
             "(a sort: O(n log n) in the instructions)")
PEAK = "one comparison per bank allocation (MSET) in the functional pass"
CLOCK = "two clock reads a run"
OVERHEAD = {
    "cycles": AT_THE_END, "instructions": TIMING_ADD, "core_ops": TIMING_ADD, "busy_cycles": INTERVALS,
    "idle_cycles": INTERVALS, "core_op_cycles": TIMING_ADD, "core_op_elements": FUNCTIONAL_ADD,
    "peak_allocated_rows": PEAK, "peak_allocated_bytes": PEAK, "dma_bytes_in": FUNCTIONAL_ADD,
    "dma_bytes_out": FUNCTIONAL_ADD, "dma_transfers_in": FUNCTIONAL_ADD, "dma_transfers_out": FUNCTIONAL_ADD,
    "dma_bursts": FUNCTIONAL_ADD, "dma_busy_cycles": INTERVALS, "dma_bus_wait_cycles": TIMING_ADD,
    "ball_ops": TIMING_ADD, "ball_busy_cycles": TIMING_ADD, "ball_macs": FUNCTIONAL_ADD,
    "rows_read": FUNCTIONAL_ADD, "rows_written": FUNCTIONAL_ADD, "channel_conflicts": TIMING_ADD,
    "shared_channel_conflicts": TIMING_ADD, "shared_bytes_used": AT_THE_END, "channel_wait_cycles": TIMING_ADD,
    "bus_busy_cycles": TIMING_ADD, "host_setup_seconds": CLOCK, "host_functional_seconds": CLOCK,
    "host_timing_seconds": CLOCK, "host_exec_seconds": CLOCK,
    **{f"stall_{cause}_cycles": TIMING_ADD for cause in
       ("rob_full", "frontend", "dependence", "ball_queue", "channel", "dma", "fence", "barrier")},
}


_SPECS = [
    CounterSpec("cycles", "cycles", "chip", "completion of the last core (emulated cycles)"),
    CounterSpec("cycles", "cycles", "core", "the core's last commit or core-op end (emulated cycles)"),
    CounterSpec("instructions", "instructions", "core", "accelerator instructions the core issued (every one but core ops)"),
    CounterSpec("core_ops", "ops", "core", "core ops the core ran"),
    CounterSpec("busy_cycles", "cycles", "core",
                "cycles in which at least one unit of the core (a Ball, the DMA engine, the core running a core "
                "op, an MSET/FENCE/BARRIER's own cost) was working"),
    CounterSpec("idle_cycles", "cycles", "core", "cycles - busy_cycles: nothing of the core was working"),
    CounterSpec("stall_rob_full_cycles", "instruction-cycles", "core",
                "dispatch waited for a reorder-buffer entry (the commit of the instruction rob_entries earlier)"),
    CounterSpec("stall_frontend_cycles", "instruction-cycles", "core",
                "issue waited for a free issue slot (issue_per_cycle a cycle)"),
    CounterSpec("stall_dependence_cycles", "instruction-cycles", "core",
                "start waited for a read-after-write operand (or an MSET for earlier accesses to its bank)"),
    CounterSpec("stall_ball_queue_cycles", "instruction-cycles", "core",
                "a Ball op waited for a reservation-queue slot, for an older Ball op ahead of it, or for its busy Ball"),
    CounterSpec("stall_channel_cycles", "instruction-cycles", "core", "start waited for free bank channels"),
    CounterSpec("stall_dma_cycles", "instruction-cycles", "core",
                "a transfer waited for a DMA queue slot, an older transfer or a free burst slot"),
    CounterSpec("stall_fence_cycles", "instruction-cycles", "core", "a FENCE waited for the reorder buffer to drain"),
    CounterSpec("stall_barrier_cycles", "instruction-cycles", "core",
                "a BARRIER waited from dispatch until release (drain, then the tile's last core)"),
    CounterSpec("core_op_cycles", "cycles", "core", "cycles the core spent running core ops"),
    CounterSpec("core_op_elements", "elements", "core", "elements charged to core ops"),
    CounterSpec("peak_allocated_rows", "rows", "core",
                "high-water mark of allocated private SRAM rows (col x addressable rows summed over live "
                "virtual banks; rows past the row-address field are not counted)"),
    CounterSpec("peak_allocated_bytes", "bytes", "core", "peak_allocated_rows x row_bytes"),
    CounterSpec("dma_bytes_in", "bytes", "core", "bytes MVIN moved DRAM -> banks"),
    CounterSpec("dma_bytes_out", "bytes", "core", "bytes MVOUT moved banks -> DRAM"),
    CounterSpec("dma_transfers_in", "transfers", "core", "MVIN instructions"),
    CounterSpec("dma_transfers_out", "transfers", "core", "MVOUT instructions"),
    CounterSpec("dma_bursts", "bursts", "core", "DRAM bursts (each contiguous run cut at burst_max_bytes)"),
    CounterSpec("dma_busy_cycles", "cycles", "core", "cycles with at least one transfer of the core in progress"),
    CounterSpec("dma_bus_wait_cycles", "cycles", "core",
                "cycles transfers lasted beyond their uncontended time, waiting for the shared system bus"),
    CounterSpec("ball_ops", "ops", "ball", "operations the Ball ran"),
    CounterSpec("ball_busy_cycles", "cycles", "ball", "cycles the Ball was running an operation (sum of latencies)"),
    CounterSpec("ball_macs", "MACs", "ball",
                "multiply-accumulates the Ball was given (matrix: M x N x K an op, the padded operands; vector "
                "matmul: 16 x 16 x K)"),
    CounterSpec("rows_read", "rows", "bank", "rows (16-byte lines) read from the physical bank, by DMA or a Ball"),
    CounterSpec("rows_written", "rows", "bank", "rows (16-byte lines) written to the physical bank, by DMA or a Ball"),
    CounterSpec("channel_conflicts", "events", "channel",
                "operations whose start the core's bank channels (or its tile's shared channels) delayed"),
    CounterSpec("shared_channel_conflicts", "events", "channel",
                "of channel_conflicts, operations whose start the tile's shared-memory channels delayed"),
    CounterSpec("shared_bytes_used", "bytes", "bank",
                "(per tile) shared-memory banks of the tile any instruction touched, whole (shared_memory.rows x row_bytes each)"),
    CounterSpec("channel_wait_cycles", "cycles", "channel", "cycles those operations waited for channels"),
    CounterSpec("bus_busy_cycles", "cycles", "channel", "cycles the shared system bus carried DMA data"),
    CounterSpec("host_setup_seconds", "seconds", "host", "host time building the machine and DRAM image (not emulated time)"),
    CounterSpec("host_functional_seconds", "seconds", "host", "host time in the functional pass (checks, numpy execution)"),
    CounterSpec("host_timing_seconds", "seconds", "host", "host time in the timing pass"),
    CounterSpec("host_exec_seconds", "seconds", "host", "host_functional_seconds + host_timing_seconds"),
]
# Every counter says its overhead (a KeyError here: a new counter without one).
_SPECS = [replace(s, overhead=OVERHEAD[s.name]) for s in _SPECS]
CATALOGUE: dict[tuple[str, str], CounterSpec] = {(s.name, s.scope): s for s in _SPECS}


def spec(name: str, scope: str | None = None) -> CounterSpec:
    """The documentation of a counter (scope needed only for `cycles`, which has two)."""
    if scope is not None:
        return CATALOGUE[(name, scope)]
    found = [s for s in _SPECS if s.name == name]
    if not found:
        raise KeyError(f"no counter {name!r}")
    return found[0]


@dataclass(frozen=True)
class Counter:
    name: str
    value: Any
    unit: str
    scope: str
    where: dict = field(default_factory=dict)

    @property
    def event(self) -> str:
        return CATALOGUE[(self.name, self.scope)].event


class Counters:
    """All counters of a run. ``value(name, **where)`` picks one; ``total(name)`` sums."""

    def __init__(self, rows: list[Counter]):
        self._rows = rows
        self._index: dict[tuple, Counter] = {}
        for r in rows:
            self._index[(r.name, r.scope, tuple(sorted(r.where.items())))] = r

    def add(self, name: str, value: Any, scope: str, **where) -> None:
        s = CATALOGUE[(name, scope)]
        row = Counter(name, value, s.unit, scope, where)
        self._rows.append(row)
        self._index[(name, scope, tuple(sorted(where.items())))] = row

    def __iter__(self) -> Iterator[Counter]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def find(self, name: str, **where) -> list[Counter]:
        return [r for r in self._rows if r.name == name and all(r.where.get(k) == v for k, v in where.items())]

    def value(self, name: str, scope: str | None = None, **where) -> Any:
        """The one counter `name` at `where` (e.g. ``value("cycles", core=0)``)."""
        if scope is None:
            scope = _default_scope(name, where)
        r = self._index.get((name, scope, tuple(sorted(where.items()))))
        if r is None:  # `where` may name only some coordinates (ball="matrix" without ball_id)
            found = [x for x in self.find(name, **where) if x.scope == scope]
            if len(found) != 1:
                raise KeyError(f"{len(found)} counters {name!r} (scope {scope}) at {where}")
            r = found[0]
        return r.value

    def total(self, name: str, **where) -> Any:
        return sum(r.value for r in self.find(name, **where))

    def rows(self) -> list[dict]:
        """Plain rows (name, value, unit, scope, coordinates, event), e.g. for a DataFrame."""
        return [{"name": r.name, "value": r.value, "unit": r.unit, "scope": r.scope, **r.where, "event": r.event}
                for r in self._rows]


def _default_scope(name: str, where: dict) -> str:
    scopes = [s.scope for s in _SPECS if s.name == name]
    if not scopes:
        raise KeyError(f"no counter {name!r}")
    if len(scopes) == 1:
        return scopes[0]
    return "core" if "core" in where else "chip"
