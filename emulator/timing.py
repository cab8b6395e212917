"""The timing model: how long a program takes, from the functional pass's records.

Two modes, both deterministic (integer cycles; ties broken by program order and core id).

``serial`` — the framework's own emulator: every instruction costs its latency and the
next starts when it ends; no overlap, no contention. Costs: a Ball op its latency formula
(``balls[].latency``, or the generic systolic model for a matrix Ball with ``timing =
"systolic"``); MVIN/MVOUT ``ceil(bursts / k) * dma.latency_cycles + beats`` with ``k =
min(dma.bursts_in_flight, dma.inflight_requests)`` (every contiguous DRAM run is cut into
bursts of at most ``dma.burst_max_bytes``; 16-byte beats); MSET ``front_end.mset_cycles``;
FENCE ``front_end.fence_cycles``; a core op ``ceil(elements * cycles per element)``; any
operand in shared memory adds ``shared_memory.latency_cycles``. A BARRIER waits for the
last core of the tile, then costs ``front_end.barrier_cycles``. Cores run in parallel.

``overlapped`` (default) — per instruction, in program order, each instruction's times
are the earliest that every resource allows (list scheduling; a resource is reserved for
an interval, and later instructions may use earlier free gaps):

* **Dispatch** ``D``: the core sends ``front_end.issue_per_cycle`` instructions a cycle
  into the reorder buffer (``rob_entries``); a full buffer waits for the commit of the
  instruction ``rob_entries`` earlier. A core op runs on the core first: nothing is sent
  while it runs. After a FENCE or BARRIER nothing is sent until it completes.
* **Issue** ``I >= D + front_end.issue_delay``: at most ``issue_per_cycle`` issues a cycle.
  Ball ops enter the shared ``ball_queue_depth``-entry reservation queue in program order
  (a slot frees when an op leaves the queue for its Ball); MVIN/MVOUT enter the DMA
  engine's queue of ``dma.outstanding`` transactions in program order (a slot frees at
  completion). Operands are waited for in the queue.
* **Start** ``S``: operands ready (bank renaming: only read-after-write dependences, on
  whole banks; an accumulating matrix op, or one writing C from a nonzero base row, also
  waits for the previous writer of C; an MSET waits for every earlier access to its bank,
  and an allocation for the free of the physical banks it takes); the queue's head-of-line
  order (a busy Ball blocks the ops queued behind it; the DMA engine takes transfers in
  order); the unit free (each Ball runs one op at a time); and enough free bank channels
  for the whole run (``banks.channels`` a core, shared by DMA and every Ball port: a Ball
  op holds ``read_ports + write_ports``, a transfer 1; ports on shared-memory banks use
  the tile's ``shared_memory.channels`` instead).
* **Complete** ``C``: a Ball op ``S + latency``. A transfer issues its bursts in order, at
  most ``k`` in flight; a burst's data arrives ``dma.latency_cycles`` after its request and
  streams one beat a cycle over the chip's system bus (``dma.system_bus_bytes`` a cycle,
  shared by every core's DMA: bursts wait for a free gap); the transfer completes with its
  last beat (plus the shared-memory latency for a shared bank). Alone, a transfer takes
  exactly its serial cost.
* **Commit** ``K = max(C, K_previous)``: in order, any number a cycle. A FENCE completes
  at ``max(D, K_previous) + fence_cycles``; a BARRIER at the latest arrival
  (``max(D, K_previous)``) of the tile's cores ``+ barrier_cycles``.

A core's cycles are its last commit (or core-op end); the chip's, the largest core's.

Not modelled (yet): the rename-alias pool (renaming never runs out), the optional per-tile
cache in front of DRAM (``cache.enabled`` is ignored), ``banks.read_latency`` (the Ball
formulas already include it), and ordering between a core op and in-flight DMA on the
same DRAM bytes (programs put a FENCE between them, as the framework's toolchain does;
the functional model is in program order either way).
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from collections import deque

import numpy as np

from .errors import ProgramError
from .machine import BALL, BARRIER, CORE, FENCE, MSET, MVIN, MVOUT, SHARED_KEY

STALL_CAUSES = ("rob_full", "frontend", "dependence", "ball_queue", "channel", "dma", "fence", "barrier")


def union_length(starts: list, ends: list) -> int:
    """Total length of the union of intervals [s, e) (lists, or int64 arrays from the compiled core)."""
    if len(starts) == 0:
        return 0
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    prev_end = np.maximum.accumulate(e)
    reach = np.concatenate(([s[0]], prev_end[:-1]))
    return int(np.maximum(0, e - np.maximum(s, reach)).sum())


class Pool:
    """A counted resource held over intervals: bank channels of a core or of a tile."""

    __slots__ = ("cap", "res")

    def __init__(self, cap: int):
        self.cap = cap
        self.res: list[tuple[int, int, int]] = []

    def earliest(self, t0: int, dur: int, need: int) -> int:
        return _pool_earliest(self.res, self.cap, t0, dur, need)

    def hold(self, start: int, end: int, ports: int, horizon: int) -> None:
        res = self.res
        if len(res) > 24:
            self.res = res = [r for r in res if r[1] > horizon]
        if end > start:
            res.append((start, end, ports))


class Bus:
    """The system bus: busy intervals (sorted, merged); a burst takes the first free gap."""

    __slots__ = ("starts", "ends", "busy")

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.busy = 0

    def alloc(self, at: int, length: int) -> int:
        starts, ends = self.starts, self.ends
        self.busy += length
        if not ends or at > ends[-1]:  # after everything reserved: append
            starts.append(at)
            ends.append(at + length)
            return at
        if at == ends[-1]:
            ends[-1] = at + length
            return at
        self.busy -= length
        index = bisect_right(ends, at)
        held = len(starts)
        while index < held and starts[index] < at + length:
            if ends[index] > at:
                at = ends[index]
            index += 1
        end = at + length
        self.busy += length
        if index > 0 and ends[index - 1] == at:
            if index < held and starts[index] == end:
                ends[index - 1] = ends[index]
                del starts[index], ends[index]
            else:
                ends[index - 1] = end
        elif index < held and starts[index] == end:
            starts[index] = at
        else:
            starts.insert(index, at)
            ends.insert(index, end)
        return at

    def prune(self, horizon: int) -> None:
        expired = bisect_right(self.ends, horizon)
        if expired > 32:
            del self.starts[:expired], self.ends[:expired]


class ArrayBus(Bus):
    """The system bus of `run_overlapped`: `Bus` (its `alloc` and `prune`, burst by burst, on
    the same sorted busy intervals) in int64 `array.array`s rather than lists, so that a
    transfer's run of bursts is checked and merged (`run`) with numpy on zero-copy views of
    them: `Bus` made a numpy copy of each window of its lists and a list of each merge, and
    the Llama layer's transfers (hundreds of bursts between other cores' hundreds) spent
    most of the timing pass on those copies."""

    __slots__ = ()

    def __init__(self):
        super().__init__()
        self.starts, self.ends = array("q"), array("q")

    def run(self, first: int, bursts: int, step: int, occ: int) -> int:
        """Reserve bursts ``[first + j * step, + occ)`` for j = 0, 1, ... up to the first that
        meets a reserved interval (at most `bursts`; ``step > occ``): how many were reserved."""
        bus_starts, bus_ends = self.starts, self.ends
        held = len(bus_starts)
        if not held or first >= bus_ends[-1]:  # after everything reserved
            lo = hi = held
        else:
            lo, hi = bisect_right(bus_ends, first), bisect_left(bus_starts, first + (bursts - 1) * step + occ)
        starts = np.arange(first, first + bursts * step, step, dtype=np.int64)
        if lo >= hi:
            bus_starts[lo:lo] = array("q", starts.tobytes())
            bus_ends[lo:lo] = array("q", (starts + occ).tobytes())
            self.busy += bursts * occ
            return bursts
        # Views of the arrays' memory: deleted before the arrays change size (which they
        # refuse while a buffer is exported).
        s_all, e_all = np.frombuffer(bus_starts, dtype=np.int64), np.frombuffer(bus_ends, dtype=np.int64)
        window_starts, window_ends = s_all[lo:hi], e_all[lo:hi]
        idx = window_ends.searchsorted(starts, side="right")  # the first interval ending after each
        inside = idx < hi - lo
        clash = np.zeros(bursts, dtype=bool)
        clash[inside] = window_starts[idx[inside]] < starts[inside] + occ
        run = int(np.argmax(clash)) if clash.any() else bursts
        if run:
            new = starts[:run]
            pos = window_starts.searchsorted(new) + np.arange(run)  # the new bursts' places among the window's
            merged_count = hi - lo + run
            merged_starts, merged_ends = np.empty(merged_count, dtype=np.int64), np.empty(merged_count, dtype=np.int64)
            old = np.ones(merged_count, dtype=bool)
            old[pos] = False
            merged_starts[pos], merged_ends[pos] = new, new + occ
            merged_starts[old], merged_ends[old] = window_starts, window_ends
        del s_all, e_all, window_starts, window_ends
        if run:
            bus_starts[lo:hi] = array("q", merged_starts.tobytes())
            bus_ends[lo:hi] = array("q", merged_ends.tobytes())
            self.busy += run * occ
        return run


class Tile:
    """Per-tile shared state: shared-memory channels and bank dependences."""

    __slots__ = ("pool", "write_done", "mset_done", "access_done")

    def __init__(self, cap: int):
        self.pool = Pool(cap)
        self.write_done: dict[int, int] = {}
        self.mset_done: dict[int, int] = {}
        self.access_done: dict[int, int] = {}


class CoreTimes:
    """What the timing pass learned about one core."""

    def __init__(self, n_balls: int):
        self.cycles = 0
        self.instructions = 0
        self.core_ops = 0
        self.stalls = dict.fromkeys(STALL_CAUSES, 0)
        self.busy_s: list[int] = []
        self.busy_e: list[int] = []
        self.dma_s: list[int] = []
        self.dma_e: list[int] = []
        self.ball_ops = [0] * n_balls
        self.ball_busy = [0] * n_balls
        self.core_op_cycles = 0
        self.channel_conflicts = 0
        self.channel_wait = 0
        self.shared_channel_conflicts = 0
        self.bus_wait = 0
        self.dma_latency_sum = 0

    def busy(self) -> int:
        return union_length(self.busy_s, self.busy_e)

    def dma_busy(self) -> int:
        return union_length(self.dma_s, self.dma_e)


class _Trace:
    def __init__(self):
        self.itrace: list[dict] = []
        self.mtrace: list[dict] = []
        self.pmctrace: list[dict] = []

    def add(self, core, rec, seq, rob, issue_at, start, complete, op_names):
        kind, pc, lat, unit, *_rest = rec
        mtr = rec[10]
        op = op_names(core, pc)
        self.itrace.append({"event": "issue", "core": core, "pc": pc, "rob_id": seq % rob, "op": op, "cycle": issue_at})
        self.itrace.append({"event": "complete", "core": core, "pc": pc, "rob_id": seq % rob, "op": op,
                            "cycle": complete})
        if kind == BALL:
            self.pmctrace.append({"event": "ball", "core": core, "ball_id": unit, "rob_id": seq % rob,
                                  "elapsed": complete - start})
        elif kind == MVIN or kind == MVOUT:
            self.pmctrace.append({"event": "load" if kind == MVIN else "store", "core": core, "rob_id": seq % rob,
                                  "elapsed": complete - start})
        if mtr:
            for access, bank, col, row, rows in mtr:
                self.mtrace.append({"event": access, "core": core, "pc": pc, "bank": bank, "col": col, "row": row,
                                    "rows": rows, "cycle": start if access == "read" else complete})


# ---------------------------------------------------------------------------------- serial
def run_serial(records, chip, trace=None, op_names=None) -> list[CoreTimes]:
    n_cores = len(records)
    n_balls = len(chip.balls)
    times = [CoreTimes(n_balls) for _ in range(n_cores)]
    tile_size = chip.cores.tile_size
    rob = chip.front_end.rob_entries
    bar_cycles = chip.front_end.barrier_cycles
    pos = [0] * n_cores
    clock = [0] * n_cores
    active = list(range(n_cores))
    while active:
        arrived = []
        for core in active:
            recs, core_times, now, pc = records[core], times[core], clock[core], pos[core]
            while pc < len(recs):
                rec = recs[pc]
                kind, lat = rec[0], rec[2]
                if kind == BARRIER:
                    core_times.instructions += 1
                    arrived.append(core)
                    break
                start = now
                now += lat
                if lat:
                    core_times.busy_s.append(start)
                    core_times.busy_e.append(now)
                if kind == BALL:
                    core_times.ball_ops[rec[3]] += 1
                    core_times.ball_busy[rec[3]] += lat
                elif kind == MVIN or kind == MVOUT:
                    core_times.dma_s.append(start)
                    core_times.dma_e.append(now)
                    core_times.dma_latency_sum += lat
                if kind == CORE:
                    core_times.core_ops += 1
                    core_times.core_op_cycles += lat
                else:
                    core_times.instructions += 1
                if trace is not None:
                    trace.add(core, rec, pc, rob, start, start, now, op_names)
                pc += 1
            clock[core], pos[core] = now, pc
        # release the barriers, tile by tile
        by_tile: dict[int, list[int]] = {}
        for core in arrived:
            by_tile.setdefault(core // tile_size, []).append(core)
        for tile_cores in by_tile.values():
            released = max(clock[core] for core in tile_cores) + bar_cycles
            for core in tile_cores:
                times[core].stalls["barrier"] += released - clock[core]
                if trace is not None:
                    trace.add(core, records[core][pos[core]], pos[core], rob, clock[core], clock[core], released,
                              op_names)
                if bar_cycles:
                    times[core].busy_s.append(released - bar_cycles)
                    times[core].busy_e.append(released)
                clock[core] = released
                pos[core] += 1
        active = arrived
    for core in range(n_cores):
        times[core].cycles = clock[core]
    return times


# ------------------------------------------------------------------------------ overlapped
# A run of at least this many bursts is checked against the bus as one numpy search.
BURST_RUN = 8


def _bursts_one_in_flight(bus: Bus, req: int, groups, dram_latency: int, bus_cycles_per_beat: float) -> int:
    """The end of a transfer's bursts with one burst in flight (one burst slot), from `req`,
    the first request; the bus intervals reserved as the one-burst-at-a-time loop does.

    Burst j is requested when burst j - 1's last beat arrives; its data is due ``dram_latency`` later
    and takes the bus's first free gap of its occupancy from then on (`Bus.alloc`). Until
    a burst meets an interval already reserved, the bursts follow the nominal schedule
    ``arrival + j * (beats + dram_latency)``: a run of them is checked against the reserved intervals in its
    window with one search, and reserved at once (touching intervals are not merged, which
    no first-fit answer can tell); the first that meets one takes the scalar path."""
    bus_starts, bus_ends = bus.starts, bus.ends
    end = None
    for count, bbeats in groups:
        occ = max(1, int(-(-bbeats * bus_cycles_per_beat // 1)))
        step = bbeats + dram_latency
        sent = 0
        while sent < count:
            arrival = req + dram_latency
            left = count - sent
            if left >= BURST_RUN and step > occ:
                last = arrival + (left - 1) * step + occ  # the end of the run's last interval
                lo, hi = bisect_right(bus_ends, arrival), bisect_left(bus_starts, last)
                nominal = range(arrival, arrival + left * step, step)
                if lo >= hi:
                    run = left
                else:
                    window_starts, window_ends = np.array(bus_starts[lo:hi]), np.array(bus_ends[lo:hi])
                    starts = np.arange(arrival, arrival + left * step, step, dtype=np.int64)
                    # the first interval ending after each
                    first_after = np.searchsorted(window_ends, starts, side="right")
                    inside = first_after < len(window_starts)
                    clash = np.zeros(left, dtype=bool)
                    clash[inside] = window_starts[first_after[inside]] < starts[inside] + occ
                    run = int(np.argmax(clash)) if clash.any() else left
                if run:
                    new_s = nominal[:run]
                    new_e = range(arrival + occ, arrival + occ + run * step, step)
                    if lo >= hi:
                        bus_starts[lo:lo] = new_s
                        bus_ends[lo:lo] = new_e
                    else:  # between reserved intervals of the window, none of which they meet
                        all_s = np.concatenate((window_starts, np.asarray(new_s, dtype=np.int64)))
                        all_e = np.concatenate((window_ends, np.asarray(new_e, dtype=np.int64)))
                        order = np.argsort(all_s, kind="stable")
                        bus_starts[lo:hi] = all_s[order].tolist()
                        bus_ends[lo:hi] = all_e[order].tolist()
                    bus.busy += run * occ
                    end = req = new_s[-1] + bbeats
                    sent += run
                    continue
            if not bus_ends or arrival > bus_ends[-1]:  # the bus is free from t on
                bus_starts.append(arrival)
                bus_ends.append(arrival + occ)
                bus.busy += occ
            elif arrival == bus_ends[-1]:
                bus_ends[-1] = arrival + occ
                bus.busy += occ
            else:
                arrival = bus.alloc(arrival, occ)
            end = req = arrival + bbeats
            sent += 1
    return end


def _bursts_on_array_bus(bus: ArrayBus, req: int, groups, dram_latency: int, bus_cycles_per_beat: float) -> int:
    """`_bursts_one_in_flight` on an `ArrayBus`: the same end, the same intervals reserved."""
    bus_starts, bus_ends = bus.starts, bus.ends
    end = None
    for count, bbeats in groups:
        occ = max(1, int(-(-bbeats * bus_cycles_per_beat // 1)))
        step = bbeats + dram_latency
        sent = 0
        while sent < count:
            arrival = req + dram_latency
            left = count - sent
            if left >= BURST_RUN and step > occ:
                run = bus.run(arrival, left, step, occ)
                if run:
                    end = req = arrival + (run - 1) * step + bbeats
                    sent += run
                    continue
            if not bus_ends or arrival > bus_ends[-1]:  # the bus is free from t on (as `_bursts_one_in_flight`)
                bus_starts.append(arrival)
                bus_ends.append(arrival + occ)
                bus.busy += occ
            elif arrival == bus_ends[-1]:
                bus_ends[-1] = arrival + occ
                bus.busy += occ
            else:
                arrival = bus.alloc(arrival, occ)
            end = req = arrival + bbeats
            sent += 1
    return end


def _fits(res: list, cap: int, at: int, end: int) -> bool:
    """Whether the pool's use stays <= cap over [at, end) (use only rises at starts)."""
    used = 0
    for held_start, held_end, held_ports in res:
        if held_start <= at < held_end:
            used += held_ports
    if used > cap:
        return False
    for later_start, _e, _n in res:
        if at < later_start < end:
            used = 0
            for held_start, held_end, held_ports in res:
                if held_start <= later_start < held_end:
                    used += held_ports
            if used > cap:
                return False
    return True


def _pool_earliest(res: list, cap: int, t0: int, dur: int, need: int) -> int:
    """Earliest time >= t0 at which `need` more units of a pool of `cap` are free for `dur` cycles."""
    if dur <= 0 or not res:
        return t0
    cap -= need
    total = 0
    end = t0 + dur
    for held in res:
        if held[1] > t0 and held[0] < end:
            total += held[2]
    if total <= cap or _fits(res, cap, t0, t0 + dur):
        return t0
    for at in sorted({held[1] for held in res if held[1] > t0}):
        if _fits(res, cap, at, at + dur):
            return at
    raise AssertionError("a pool never frees")


def _small_groups(groups, dram_latency: int, bus_cycles_per_beat: float):
    """A transfer's burst groups as ``(count, beats, bus occupancy)``, or None where a group
    could take `_bursts_on_array_bus`'s run path (`BURST_RUN` bursts or more)."""
    out = []
    for count, bbeats in groups:
        occ = max(1, int(-(-bbeats * bus_cycles_per_beat // 1)))
        if count >= BURST_RUN and bbeats + dram_latency > occ:
            return None
        out.append((count, bbeats, occ))
    return tuple(out) if out else None


def _core_proc(cid, recs, chip, times: CoreTimes, tile: Tile, bus, solo: bool, trace, op_names, heap=None):
    """The overlapped timing of one core, as a generator (its state lives in fast locals).

    Protocol: the first ``send(None)`` starts it. Unless `solo`, it yields the lower bound
    of its next dispatch and is resumed with ``send(horizon)`` (no core will ever request
    a shared resource before `horizon`). It yields only when it is no longer the earliest
    core of `heap` (`run_overlapped`'s: (next dispatch, core) of the others) or after a
    BARRIER; meanwhile it goes on as the driver would have resumed it, with the driver's
    horizon. At a BARRIER it yields ``("barrier", arrival)`` and is resumed with
    ``send(release)``. It returns at the end. `emulator.timing_reference` keeps the loop
    that yields after every instruction (and none of the fast paths below).
    """
    front_end, dma = chip.front_end, chip.dma
    issue_width = front_end.issue_per_cycle
    rob_entries = front_end.rob_entries
    delay = front_end.issue_delay
    ball_queue_depth = front_end.ball_queue_depth
    bar_cycles = front_end.barrier_cycles
    dispatched = deque(maxlen=issue_width)
    rob = deque(maxlen=rob_entries)
    last_complete = 0
    core_free = 0
    release = 0
    issued: dict[int, int] = {}  # issue slots used a cycle (issue_per_cycle > 1)
    issue_cycles: set[int] = set()  # cycles with an issue (issue_per_cycle == 1)
    single_issue = issue_width == 1
    dfloor = 0  # earliest next dispatch by the dispatch rate
    ball_queue = deque(maxlen=ball_queue_depth)
    ball_last_issue = ball_last_start = 0
    ball_free = [0] * len(chip.balls)
    outstanding = dma.outstanding
    dma_queue = deque(maxlen=outstanding)
    dma_last_issue = dma_last_start = 0
    burst_slots = min(dma.bursts_in_flight, dma.inflight_requests)
    slots = [0] * burst_slots
    dram_latency = dma.latency_cycles
    bus_cycles_per_beat = dma.beat_bytes / dma.system_bus_bytes
    fast_dma = solo and burst_slots == 1
    bursts = _bursts_on_array_bus if type(bus) is ArrayBus else _bursts_one_in_flight
    # A private bank's dependence times by virtual bank id (lists: indexed, no dict lookups);
    # shared banks' (keys >= SHARED_KEY) in the tile's dicts.
    core_banks = chip.core_chip(cid).banks
    write_done = [0] * core_banks.virtual_ids  # last write completes
    mset_done = [0] * core_banks.virtual_ids  # last MSET completes
    access_done = [0] * core_banks.virtual_ids  # last access completes
    shared_write_done, shared_mset_done, shared_access_done = tile.write_done, tile.mset_done, tile.access_done
    tpool = tile.pool
    phys_free = [0] * core_banks.count
    res: list = []
    cap = chip.core_chip(cid).banks.channels  # the core's own group's bank channels
    st_rob = st_front = st_dep = st_bq = st_chan = st_dma = st_fence = st_bar = 0
    busy_s, busy_e = times.busy_s, times.busy_e
    dma_s, dma_e = times.dma_s, times.dma_e
    ball_ops, ball_busy = times.ball_ops, times.ball_busy
    n_instr = n_core = core_cycles = conflicts = chan_wait = bus_wait = dma_sum = 0
    shared_conflicts = 0  # of the conflicts, those the tile's shared-memory channels caused
    seq = 0
    horizon = 0
    tracer = trace
    ahead = heap is not None and not solo
    if heap is None:
        heap = []
    # Entries of `res` that end at or before every later Ball or DMA start can meet no later
    # request: those starts are in order per queue and never before the dispatch D.
    res_lim = 8
    small_groups: dict = {}  # burst groups -> `_small_groups`
    prune = bus.prune
    yield None
    for rec in recs:
        kind = rec[0]
        lat = rec[2]
        # dispatch lower bound: issue rate, core ops, fences/barriers
        dispatch = dfloor
        if core_free > dispatch:
            dispatch = core_free
        if release > dispatch:
            dispatch = release
        if kind == CORE:
            end = dispatch + lat
            core_free = end
            if lat:
                busy_s.append(dispatch)
                busy_e.append(end)
            n_core += 1
            core_cycles += lat
            if end > last_complete:
                last_complete = end
            if tracer is not None:
                tracer.add(cid, rec, seq, rob_entries, dispatch, dispatch, end, op_names)
            if not solo:
                horizon = yield max(core_free, release)
            continue
        n_instr += 1
        if len(rob) == rob_entries and rob[0] > dispatch:
            st_rob += rob[0] - dispatch
            dispatch = rob[0]
        if single_issue:
            dfloor = dispatch + 1
        else:
            dispatched.append(dispatch)
            if len(dispatched) == issue_width:
                dfloor = dispatched[0] + 1
        if solo:
            horizon = dispatch
        if kind == MVIN or kind == MVOUT:
            _, pc, lat, unit, rkeys, wkeys, rmw, private_ports, shared_ports, extra, _m = rec
            n_bursts, beats, groups, nbytes, extra_lat = extra
            at_unit = dispatch + delay
            earliest = at_unit if at_unit > dma_last_issue else dma_last_issue
            if len(dma_queue) == outstanding and dma_queue[0] > earliest:
                earliest = dma_queue[0]
            issue_at = earliest
            if single_issue:
                while issue_at in issue_cycles:
                    issue_at += 1
                issue_cycles.add(issue_at)
            else:
                while issued.get(issue_at, 0) >= issue_width:
                    issue_at += 1
                issued[issue_at] = issued.get(issue_at, 0) + 1
            if issue_at > at_unit:
                if earliest > at_unit:
                    st_dma += issue_at - at_unit
                else:
                    st_front += issue_at - at_unit
            ready = 0
            for key in rkeys:
                dep_time = write_done[key] if key < SHARED_KEY else shared_write_done.get(key, 0)
                if dep_time > ready:
                    ready = dep_time
            for key in wkeys:
                dep_time = mset_done[key] if key < SHARED_KEY else shared_mset_done.get(key, 0)
                if dep_time > ready:
                    ready = dep_time
            unit_t = dma_last_start
            first_slot = slots[0] if burst_slots == 1 else min(slots)
            if first_slot > unit_t:
                unit_t = first_slot
            start = issue_at
            if ready > start or unit_t > start:
                if ready >= unit_t:
                    st_dep += ready - issue_at
                    start = ready
                else:
                    st_dma += unit_t - issue_at
                    start = unit_t
            if len(res) > res_lim:
                floor = ball_last_start if ball_last_start < dma_last_start else dma_last_start
                if floor < dispatch:
                    floor = dispatch
                res = [held for held in res if held[1] > floor]
                res_lim = 2 * len(res) if len(res) > 4 else 8
            start_asked = start
            if not shared_ports:
                tot = private_ports
                end = start + lat
                for held_start, held_end, held_ports in res:
                    if held_end > start and held_start < end:
                        tot += held_ports
                if tot > cap:
                    start = _pool_earliest(res, cap, start, lat, private_ports)
            else:
                start = _pool_earliest(tpool.res, tpool.cap, start, lat, shared_ports)
                shared_conflicts += start > start_asked
            if start > start_asked:
                st_chan += start - start_asked
                conflicts += 1
                chan_wait += start - start_asked
            if n_bursts == 0:
                complete = start
            elif fast_dma:
                complete = start + n_bursts * dram_latency + beats
                slots[0] = complete
                bus.busy += int(-(-beats * bus_cycles_per_beat // 1))
            elif burst_slots == 1:
                req = slots[0] if slots[0] > start else start
                small = small_groups.get(groups, 0)
                if small == 0:
                    small = small_groups[groups] = _small_groups(groups, dram_latency, bus_cycles_per_beat)
                if small is None:
                    last_end = bursts(bus, req, groups, dram_latency, bus_cycles_per_beat)
                else:  # `_bursts_on_array_bus` without its run path, which these never take
                    bus_starts, bus_ends = bus.starts, bus.ends
                    for count, bbeats, occ in small:
                        for _ in range(count):
                            earliest = req + dram_latency
                            if not bus_ends or earliest > bus_ends[-1]:  # the bus is free from t on
                                bus_starts.append(earliest)
                                bus_ends.append(earliest + occ)
                                bus.busy += occ
                            elif earliest == bus_ends[-1]:
                                bus_ends[-1] = earliest + occ
                                bus.busy += occ
                            else:
                                slot = bisect_right(bus_ends, earliest)
                                e = earliest + occ
                                if bus_starts[slot] >= e:  # a free gap at t: `Bus.alloc`'s merge without its search
                                    if slot and bus_ends[slot - 1] == earliest:
                                        if bus_starts[slot] == e:
                                            bus_ends[slot - 1] = bus_ends[slot]
                                            del bus_starts[slot], bus_ends[slot]
                                        else:
                                            bus_ends[slot - 1] = e
                                    elif bus_starts[slot] == e:
                                        bus_starts[slot] = earliest
                                    else:
                                        bus_starts.insert(slot, earliest)
                                        bus_ends.insert(slot, e)
                                    bus.busy += occ
                                else:
                                    earliest = bus.alloc(earliest, occ)
                            req = earliest + bbeats
                    last_end = req
                if last_end is None:
                    complete = start
                else:
                    complete = slots[0] = last_end
                if complete - start > lat - extra_lat:
                    bus_wait += complete - start - (lat - extra_lat)
            else:
                req = start
                end_max = start
                bus_starts, bus_ends = bus.starts, bus.ends
                for count, bbeats in groups:
                    occ = max(1, int(-(-bbeats * bus_cycles_per_beat // 1)))
                    for _ in range(count):
                        slot = slots.index(min(slots)) if burst_slots > 1 else 0
                        if slots[slot] > req:
                            req = slots[slot]
                        earliest = req + dram_latency
                        if not bus_ends or earliest > bus_ends[-1]:  # the bus is free from t on
                            bus_starts.append(earliest)
                            bus_ends.append(earliest + occ)
                            bus.busy += occ
                        elif earliest == bus_ends[-1]:
                            bus_ends[-1] = earliest + occ
                            bus.busy += occ
                        else:
                            earliest = bus.alloc(earliest, occ)
                        end = earliest + bbeats
                        slots[slot] = end
                        if end > end_max:
                            end_max = end
                complete = end_max
                if complete - start > lat - extra_lat:
                    bus_wait += complete - start - (lat - extra_lat)
            complete += extra_lat
            dma_last_start = start
            dma_last_issue = issue_at
            dma_queue.append(complete)
            if private_ports and complete > start:
                res.append((start, complete, private_ports))
            if shared_ports:
                tpool.hold(start, complete, shared_ports, horizon)
            if complete > start:
                busy_s.append(start)
                busy_e.append(complete)
                dma_s.append(start)
                dma_e.append(complete)
            dma_sum += complete - start
        elif kind == BALL:
            _, pc, lat, unit, rkeys, wkeys, rmw, private_ports, shared_ports, _x, _m = rec
            at_unit = dispatch + delay
            earliest = at_unit if at_unit > ball_last_issue else ball_last_issue
            if len(ball_queue) == ball_queue_depth and ball_queue[0] > earliest:
                earliest = ball_queue[0]
            issue_at = earliest
            if single_issue:
                while issue_at in issue_cycles:
                    issue_at += 1
                issue_cycles.add(issue_at)
            else:
                while issued.get(issue_at, 0) >= issue_width:
                    issue_at += 1
                issued[issue_at] = issued.get(issue_at, 0) + 1
            if issue_at > at_unit:
                if earliest > at_unit:
                    st_bq += issue_at - at_unit
                else:
                    st_front += issue_at - at_unit
            ready = 0
            for key in rkeys:
                dep_time = write_done[key] if key < SHARED_KEY else shared_write_done.get(key, 0)
                if dep_time > ready:
                    ready = dep_time
            for key in wkeys:
                dep_time = mset_done[key] if key < SHARED_KEY else shared_mset_done.get(key, 0)
                if dep_time > ready:
                    ready = dep_time
                if rmw:
                    dep_time = write_done[key] if key < SHARED_KEY else shared_write_done.get(key, 0)
                    if dep_time > ready:
                        ready = dep_time
            unit_t = ball_free[unit]
            if ball_last_start > unit_t:
                unit_t = ball_last_start
            start = issue_at
            if ready > start or unit_t > start:
                if ready >= unit_t:
                    st_dep += ready - issue_at
                    start = ready
                else:
                    st_bq += unit_t - issue_at
                    start = unit_t
            if private_ports or shared_ports:
                if len(res) > res_lim:
                    floor = ball_last_start if ball_last_start < dma_last_start else dma_last_start
                    if floor < dispatch:
                        floor = dispatch
                    res = [held for held in res if held[1] > floor]
                    res_lim = 2 * len(res) if len(res) > 4 else 8
                start_asked = start
                if not shared_ports:
                    tot = private_ports
                    end = start + lat
                    for held_start, held_end, held_ports in res:
                        if held_end > start and held_start < end:
                            tot += held_ports
                    if tot > cap:
                        start = _pool_earliest(res, cap, start, lat, private_ports)
                else:
                    by_shared = False
                    for _ in range(64):
                        private_ok = _pool_earliest(res, cap, start, lat, private_ports) if private_ports else start
                        shared_ok = _pool_earliest(tpool.res, tpool.cap, private_ok, lat, shared_ports)
                        by_shared |= shared_ok > private_ok
                        if shared_ok == start:
                            break
                        start = shared_ok
                    shared_conflicts += by_shared
                if start > start_asked:
                    st_chan += start - start_asked
                    conflicts += 1
                    chan_wait += start - start_asked
            complete = start + lat
            ball_free[unit] = complete
            ball_last_start = start
            ball_last_issue = issue_at
            ball_queue.append(start)
            ball_ops[unit] += 1
            ball_busy[unit] += lat
            if private_ports and complete > start:
                res.append((start, complete, private_ports))
            if shared_ports:
                tpool.hold(start, complete, shared_ports, horizon)
            if lat:
                busy_s.append(start)
                busy_e.append(complete)
        elif kind == MSET:
            _, pc, lat, alloc, rkeys, wkeys, rmw, private_ports, shared_ports, phys, _m = rec
            at_unit = dispatch + delay
            issue_at = at_unit
            if single_issue:
                while issue_at in issue_cycles:
                    issue_at += 1
                issue_cycles.add(issue_at)
            else:
                while issued.get(issue_at, 0) >= issue_width:
                    issue_at += 1
                issued[issue_at] = issued.get(issue_at, 0) + 1
            if issue_at > at_unit:
                st_front += issue_at - at_unit
            key = wkeys[0]
            ready = access_done[key]
            if alloc:
                for bank in phys:
                    dep_time = phys_free[bank]
                    if dep_time > ready:
                        ready = dep_time
            start = issue_at
            if ready > start:
                st_dep += ready - start
                start = ready
            complete = start + lat
            write_done[key] = mset_done[key] = access_done[key] = complete
            if not alloc:
                for bank in phys:
                    phys_free[bank] = complete
            if lat:
                busy_s.append(start)
                busy_e.append(complete)
            rkeys = wkeys = ()
        elif kind == FENCE:
            issue_at = start = dispatch
            complete = (dispatch if dispatch > last_complete else last_complete) + lat
            st_fence += complete - dispatch
            release = complete
            if lat:
                busy_s.append(complete - lat)
                busy_e.append(complete)
            rkeys = wkeys = ()
        elif kind == BARRIER:
            arrival = dispatch if dispatch > last_complete else last_complete
            released = yield ("barrier", arrival)
            issue_at = start = dispatch
            complete = released
            st_bar += released - dispatch
            if bar_cycles:
                busy_s.append(released - bar_cycles)
                busy_e.append(released)
            release = released
            rkeys = wkeys = ()
        # results of the instruction (a Ball op's or a transfer's: the others' keys are empty here)
        for key in wkeys:
            if key < SHARED_KEY:
                write_done[key] = complete
                if access_done[key] < complete:
                    access_done[key] = complete
            else:
                shared_write_done[key] = complete
                if shared_access_done.get(key, 0) < complete:
                    shared_access_done[key] = complete
        for key in rkeys:
            if key < SHARED_KEY:
                if access_done[key] < complete:
                    access_done[key] = complete
            elif shared_access_done.get(key, 0) < complete:
                shared_access_done[key] = complete
        if complete > last_complete:
            last_complete = complete
        rob.append(last_complete)
        if tracer is not None:
            tracer.add(cid, rec, seq, rob_entries, issue_at, start, complete, op_names)
        seq += 1
        if (seq & 4095) == 0:
            if len(issue_cycles) > 4096:
                issue_cycles = {cycle for cycle in issue_cycles if cycle >= dispatch}
            if len(issued) > 4096:
                issued = {cycle: used for cycle, used in issued.items() if cycle >= dispatch}
        if not solo:
            next_dispatch = dfloor
            if core_free > next_dispatch:
                next_dispatch = core_free
            if release > next_dispatch:
                next_dispatch = release
            if ahead and kind != BARRIER:
                # Still the earliest core: go on as the driver would resume it.
                if heap:
                    top = heap[0]
                    first_other = top[0]
                    if next_dispatch > first_other or (next_dispatch == first_other and cid > top[1]):
                        horizon = yield next_dispatch
                        continue
                    horizon = first_other if first_other < next_dispatch else next_dispatch
                else:
                    horizon = next_dispatch
                if (seq & 15) == 0:
                    prune(horizon)
            else:
                horizon = yield next_dispatch
    times.cycles = max(last_complete, core_free, release)
    times.instructions = n_instr
    times.core_ops = n_core
    times.core_op_cycles = core_cycles
    stalls = times.stalls
    for name, cycles in (("rob_full", st_rob), ("frontend", st_front), ("dependence", st_dep), ("ball_queue", st_bq),
                         ("channel", st_chan), ("dma", st_dma), ("fence", st_fence), ("barrier", st_bar)):
        stalls[name] += cycles
    times.channel_conflicts = conflicts
    times.shared_channel_conflicts = shared_conflicts
    times.channel_wait = chan_wait
    times.bus_wait = bus_wait
    times.dma_latency_sum = dma_sum


def run_overlapped(records, chip, trace=None, op_names=None, bus=None, proc=None) -> tuple[list[CoreTimes], int]:
    """Per-core times and the system bus's busy cycles. Cores advance in order of their next
    dispatch time (a heap), so shared resources (bus, shared channels) see requests in
    near-time order; every resource still fills earlier gaps. A DMA transfer books all its
    bursts on the bus when it is dispatched, so where a burst is longer than the gap between
    another transfer's bursts (``dma.latency_cycles`` below a burst's beats) the transfer
    dispatched first holds the bus to its last burst and a burst that arrives earlier waits
    behind it: there the order decides more than ties (the model follows it:
    `dse.cost.dma.bus_hold_cycles`). `proc` replaces `_core_proc` (tests:
    `emulator.timing_reference.core_proc_reference`)."""
    n_cores = len(records)
    n_balls = len(chip.balls)
    times = [CoreTimes(n_balls) for _ in range(n_cores)]
    tile_size = chip.cores.tile_size
    n_tiles = -(-max(n_cores, 1) // tile_size)
    tiles = [Tile(chip.shared_memory.channels) for _ in range(n_tiles)]
    bus = ArrayBus() if bus is None else bus  # a `Bus` for the list-based reference (tests)
    active = [core_id for core_id in range(n_cores) if records[core_id]]
    solo = len(active) <= 1
    bar_cycles = chip.front_end.barrier_cycles
    heap: list = []
    if proc is None:
        procs = {core_id: _core_proc(core_id, records[core_id], chip, times[core_id], tiles[core_id // tile_size], bus,
                                     solo, trace, op_names, heap) for core_id in active}
    else:
        procs = {core_id: proc(core_id, records[core_id], chip, times[core_id], tiles[core_id // tile_size], bus, solo,
                               trace, op_names) for core_id in active}
    members = {tile_index: [core_id for core_id in range(tile_index * tile_size, min((tile_index + 1) * tile_size,
                                                                                     n_cores)) if core_id in procs]
               for tile_index in range(n_tiles)}
    waiting: dict[int, dict[int, int]] = {}
    for core_id, proc_gen in procs.items():
        proc_gen.send(None)
        heap.append((0, core_id))
    heapq.heapify(heap)
    count = 0

    def deliver(first: int, value) -> None:
        """Resume core `first` with `value`; queue it again, or handle its barrier arrival."""
        stack = [(first, value)]
        while stack:
            core, value_in = stack.pop()
            try:
                msg = procs[core].send(value_in)
            except StopIteration:
                continue
            if type(msg) is not tuple:
                heapq.heappush(heap, (msg if msg is not None else 0, core))
                continue
            tile = core // tile_size
            arrived_at = waiting.setdefault(tile, {})
            arrived_at[core] = msg[1]
            if len(arrived_at) == len(members[tile]):
                release_at = max(arrived_at.values()) + bar_cycles
                del waiting[tile]
                for waiting_core in sorted(arrived_at, reverse=True):
                    stack.append((waiting_core, release_at))

    heappop, heappush = heapq.heappop, heapq.heappush
    while heap:
        resume_at, core_id = heappop(heap)
        proc_gen = procs[core_id]
        # Run core c for as long as it stays the earliest (same order as one heap step an
        # instruction, without the heap traffic).
        while True:
            horizon = heap[0][0] if heap and heap[0][0] < resume_at else resume_at
            try:
                msg = proc_gen.send(horizon)
            except StopIteration:
                break
            count += 1
            if count & 15 == 0:  # a search, and past 32 intervals a memmove: cheap on arrays
                bus.prune(horizon)
            if type(msg) is tuple:  # at a barrier
                tile = core_id // tile_size
                arrived_at = waiting.setdefault(tile, {})
                arrived_at[core_id] = msg[1]
                if len(arrived_at) == len(members[tile]):
                    release_at = max(arrived_at.values()) + bar_cycles
                    del waiting[tile]
                    for waiting_core in sorted(arrived_at):
                        deliver(waiting_core, release_at)
                break
            if heap and (msg, core_id) > heap[0]:
                heappush(heap, (msg, core_id))
                break
            resume_at = msg
    if waiting:
        stuck = {tile_index: sorted(arrived_at) for tile_index, arrived_at in waiting.items()}
        raise ProgramError(f"cores wait at a barrier that other cores of their tile never reach: {stuck}")
    return times, bus.busy
