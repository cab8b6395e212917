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

    def hold(self, s: int, e: int, n: int, horizon: int) -> None:
        res = self.res
        if len(res) > 24:
            self.res = res = [r for r in res if r[1] > horizon]
        if e > s:
            res.append((s, e, n))


class Bus:
    """The system bus: busy intervals (sorted, merged); a burst takes the first free gap."""

    __slots__ = ("starts", "ends", "busy")

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.busy = 0

    def alloc(self, t: int, n: int) -> int:
        starts, ends = self.starts, self.ends
        self.busy += n
        if not ends or t > ends[-1]:  # after everything reserved: append
            starts.append(t)
            ends.append(t + n)
            return t
        if t == ends[-1]:
            ends[-1] = t + n
            return t
        self.busy -= n
        i = bisect_right(ends, t)
        m = len(starts)
        while i < m and starts[i] < t + n:
            if ends[i] > t:
                t = ends[i]
            i += 1
        e = t + n
        self.busy += n
        if i > 0 and ends[i - 1] == t:
            if i < m and starts[i] == e:
                ends[i - 1] = ends[i]
                del starts[i], ends[i]
            else:
                ends[i - 1] = e
        elif i < m and starts[i] == e:
            starts[i] = t
        else:
            starts.insert(i, t)
            ends.insert(i, e)
        return t

    def prune(self, horizon: int) -> None:
        j = bisect_right(self.ends, horizon)
        if j > 32:
            del self.starts[:j], self.ends[:j]


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

    def run(self, t: int, n: int, step: int, occ: int) -> int:
        """Reserve bursts ``[t + j * step, + occ)`` for j = 0, 1, ... up to the first that
        meets a reserved interval (at most `n`; ``step > occ``): how many were reserved."""
        bs, be = self.starts, self.ends
        m = len(bs)
        if not m or t >= be[-1]:  # after everything reserved
            a = b = m
        else:
            a, b = bisect_right(be, t), bisect_left(bs, t + (n - 1) * step + occ)
        starts = np.arange(t, t + n * step, step, dtype=np.int64)
        if a >= b:
            bs[a:a] = array("q", starts.tobytes())
            be[a:a] = array("q", (starts + occ).tobytes())
            self.busy += n * occ
            return n
        # Views of the arrays' memory: deleted before the arrays change size (which they
        # refuse while a buffer is exported).
        s_all, e_all = np.frombuffer(bs, dtype=np.int64), np.frombuffer(be, dtype=np.int64)
        ws, we = s_all[a:b], e_all[a:b]
        idx = we.searchsorted(starts, side="right")  # the first interval ending after each
        inside = idx < b - a
        clash = np.zeros(n, dtype=bool)
        clash[inside] = ws[idx[inside]] < starts[inside] + occ
        run = int(np.argmax(clash)) if clash.any() else n
        if run:
            new = starts[:run]
            pos = ws.searchsorted(new) + np.arange(run)  # the new bursts' places among the window's
            k = b - a + run
            ms, me = np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int64)
            old = np.ones(k, dtype=bool)
            old[pos] = False
            ms[pos], me[pos] = new, new + occ
            ms[old], me[old] = ws, we
        del s_all, e_all, ws, we
        if run:
            bs[a:b] = array("q", ms.tobytes())
            be[a:b] = array("q", me.tobytes())
            self.busy += run * occ
        return run


class Tile:
    """Per-tile shared state: shared-memory channels and bank dependences."""

    __slots__ = ("pool", "wd", "md", "ad")

    def __init__(self, cap: int):
        self.pool = Pool(cap)
        self.wd: dict[int, int] = {}
        self.md: dict[int, int] = {}
        self.ad: dict[int, int] = {}


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

    def add(self, core, rec, seq, rob, I, S, C, op_names):
        kind, pc, lat, unit, *_rest = rec
        mtr = rec[10]
        op = op_names(core, pc)
        self.itrace.append({"event": "issue", "core": core, "pc": pc, "rob_id": seq % rob, "op": op, "cycle": I})
        self.itrace.append({"event": "complete", "core": core, "pc": pc, "rob_id": seq % rob, "op": op, "cycle": C})
        if kind == BALL:
            self.pmctrace.append({"event": "ball", "core": core, "ball_id": unit, "rob_id": seq % rob,
                                  "elapsed": C - S})
        elif kind == MVIN or kind == MVOUT:
            self.pmctrace.append({"event": "load" if kind == MVIN else "store", "core": core, "rob_id": seq % rob,
                                  "elapsed": C - S})
        if mtr:
            for rw, bank, col, row, rows in mtr:
                self.mtrace.append({"event": rw, "core": core, "pc": pc, "bank": bank, "col": col, "row": row,
                                    "rows": rows, "cycle": S if rw == "read" else C})


# ---------------------------------------------------------------------------------- serial
def run_serial(records, chip, trace=None, op_names=None) -> list[CoreTimes]:
    n = len(records)
    n_balls = len(chip.balls)
    times = [CoreTimes(n_balls) for _ in range(n)]
    tsz = chip.cores.tile_size
    rob = chip.front_end.rob_entries
    bar_cycles = chip.front_end.barrier_cycles
    pos = [0] * n
    t = [0] * n
    active = list(range(n))
    while active:
        arrived = []
        for c in active:
            recs, ct, tc, p = records[c], times[c], t[c], pos[c]
            while p < len(recs):
                rec = recs[p]
                kind, lat = rec[0], rec[2]
                if kind == BARRIER:
                    ct.instructions += 1
                    arrived.append(c)
                    break
                S = tc
                tc += lat
                if lat:
                    ct.busy_s.append(S)
                    ct.busy_e.append(tc)
                if kind == BALL:
                    ct.ball_ops[rec[3]] += 1
                    ct.ball_busy[rec[3]] += lat
                elif kind == MVIN or kind == MVOUT:
                    ct.dma_s.append(S)
                    ct.dma_e.append(tc)
                    ct.dma_latency_sum += lat
                if kind == CORE:
                    ct.core_ops += 1
                    ct.core_op_cycles += lat
                else:
                    ct.instructions += 1
                if trace is not None:
                    trace.add(c, rec, p, rob, S, S, tc, op_names)
                p += 1
            t[c], pos[c] = tc, p
        # release the barriers, tile by tile
        by_tile: dict[int, list[int]] = {}
        for c in arrived:
            by_tile.setdefault(c // tsz, []).append(c)
        for cs in by_tile.values():
            R = max(t[c] for c in cs) + bar_cycles
            for c in cs:
                times[c].stalls["barrier"] += R - t[c]
                if trace is not None:
                    trace.add(c, records[c][pos[c]], pos[c], rob, t[c], t[c], R, op_names)
                if bar_cycles:
                    times[c].busy_s.append(R - bar_cycles)
                    times[c].busy_e.append(R)
                t[c] = R
                pos[c] += 1
        active = arrived
    for c in range(n):
        times[c].cycles = t[c]
    return times


# ------------------------------------------------------------------------------ overlapped
# A run of at least this many bursts is checked against the bus as one numpy search.
BURST_RUN = 8


def _bursts_one_in_flight(bus: Bus, req: int, groups, L: int, bpb: float) -> int:
    """The end of a transfer's bursts with one burst in flight (``k == 1``), from `req`,
    the first request; the bus intervals reserved as the one-burst-at-a-time loop does.

    Burst j is requested when burst j - 1's last beat arrives; its data is due ``L`` later
    and takes the bus's first free gap of its occupancy from then on (`Bus.alloc`). Until
    a burst meets an interval already reserved, the bursts follow the nominal schedule
    ``t + j * (beats + L)``: a run of them is checked against the reserved intervals in its
    window with one search, and reserved at once (touching intervals are not merged, which
    no first-fit answer can tell); the first that meets one takes the scalar path."""
    bs, be = bus.starts, bus.ends
    end = None
    for count, bbeats in groups:
        occ = max(1, int(-(-bbeats * bpb // 1)))
        step = bbeats + L
        j = 0
        while j < count:
            t = req + L
            n = count - j
            if n >= BURST_RUN and step > occ:
                last = t + (n - 1) * step + occ  # the end of the run's last interval
                lo, hi = bisect_right(be, t), bisect_left(bs, last)
                nominal = range(t, t + n * step, step)
                if lo >= hi:
                    run = n
                else:
                    s, e = np.array(bs[lo:hi]), np.array(be[lo:hi])
                    starts = np.arange(t, t + n * step, step, dtype=np.int64)
                    idx = np.searchsorted(e, starts, side="right")  # the first interval ending after each
                    inside = idx < len(s)
                    clash = np.zeros(n, dtype=bool)
                    clash[inside] = s[idx[inside]] < starts[inside] + occ
                    run = int(np.argmax(clash)) if clash.any() else n
                if run:
                    new_s = nominal[:run]
                    new_e = range(t + occ, t + occ + run * step, step)
                    if lo >= hi:
                        bs[lo:lo] = new_s
                        be[lo:lo] = new_e
                    else:  # between reserved intervals of the window, none of which they meet
                        all_s = np.concatenate((s, np.asarray(new_s, dtype=np.int64)))
                        all_e = np.concatenate((e, np.asarray(new_e, dtype=np.int64)))
                        order = np.argsort(all_s, kind="stable")
                        bs[lo:hi] = all_s[order].tolist()
                        be[lo:hi] = all_e[order].tolist()
                    bus.busy += run * occ
                    end = req = new_s[-1] + bbeats
                    j += run
                    continue
            if not be or t > be[-1]:  # the bus is free from t on
                bs.append(t)
                be.append(t + occ)
                bus.busy += occ
            elif t == be[-1]:
                be[-1] = t + occ
                bus.busy += occ
            else:
                t = bus.alloc(t, occ)
            end = req = t + bbeats
            j += 1
    return end


def _bursts_on_array_bus(bus: ArrayBus, req: int, groups, L: int, bpb: float) -> int:
    """`_bursts_one_in_flight` on an `ArrayBus`: the same end, the same intervals reserved."""
    bs, be = bus.starts, bus.ends
    end = None
    for count, bbeats in groups:
        occ = max(1, int(-(-bbeats * bpb // 1)))
        step = bbeats + L
        j = 0
        while j < count:
            t = req + L
            n = count - j
            if n >= BURST_RUN and step > occ:
                run = bus.run(t, n, step, occ)
                if run:
                    end = req = t + (run - 1) * step + bbeats
                    j += run
                    continue
            if not be or t > be[-1]:  # the bus is free from t on (as `_bursts_one_in_flight`)
                bs.append(t)
                be.append(t + occ)
                bus.busy += occ
            elif t == be[-1]:
                be[-1] = t + occ
                bus.busy += occ
            else:
                t = bus.alloc(t, occ)
            end = req = t + bbeats
            j += 1
    return end


def _fits(res: list, cap: int, t: int, end: int) -> bool:
    """Whether the pool's use stays <= cap over [t, end) (use only rises at starts)."""
    u = 0
    for s, e, n in res:
        if s <= t < e:
            u += n
    if u > cap:
        return False
    for p, _e, _n in res:
        if t < p < end:
            u = 0
            for s, e, n in res:
                if s <= p < e:
                    u += n
            if u > cap:
                return False
    return True


def _pool_earliest(res: list, cap: int, t0: int, dur: int, need: int) -> int:
    """Earliest t >= t0 at which `need` more units of a pool of `cap` are free for [t, t+dur)."""
    if dur <= 0 or not res:
        return t0
    cap -= need
    total = 0
    end = t0 + dur
    for r in res:
        if r[1] > t0 and r[0] < end:
            total += r[2]
    if total <= cap or _fits(res, cap, t0, t0 + dur):
        return t0
    for t in sorted({r[1] for r in res if r[1] > t0}):
        if _fits(res, cap, t, t + dur):
            return t
    raise AssertionError("a pool never frees")


def _small_groups(groups, L: int, bpb: float):
    """A transfer's burst groups as ``(count, beats, bus occupancy)``, or None where a group
    could take `_bursts_on_array_bus`'s run path (`BURST_RUN` bursts or more)."""
    out = []
    for count, bbeats in groups:
        occ = max(1, int(-(-bbeats * bpb // 1)))
        if count >= BURST_RUN and bbeats + L > occ:
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
    fe, dma = chip.front_end, chip.dma
    w = fe.issue_per_cycle
    R = fe.rob_entries
    delay = fe.issue_delay
    Q = fe.ball_queue_depth
    bar_cycles = fe.barrier_cycles
    disp = deque(maxlen=w)
    rob = deque(maxlen=R)
    K = 0
    core_free = 0
    release = 0
    issued: dict[int, int] = {}  # issue slots used a cycle (issue_per_cycle > 1)
    iss: set[int] = set()  # cycles with an issue (issue_per_cycle == 1)
    w1 = w == 1
    dfloor = 0  # earliest next dispatch by the dispatch rate
    bq = deque(maxlen=Q)
    ball_last_issue = ball_last_start = 0
    ball_free = [0] * len(chip.balls)
    outstanding = dma.outstanding
    dq = deque(maxlen=outstanding)
    dma_last_issue = dma_last_start = 0
    k = min(dma.bursts_in_flight, dma.inflight_requests)
    slots = [0] * k
    L = dma.latency_cycles
    bpb = dma.beat_bytes / dma.system_bus_bytes
    fast_dma = solo and k == 1
    bursts = _bursts_on_array_bus if type(bus) is ArrayBus else _bursts_one_in_flight
    # A private bank's dependence times by virtual bank id (lists: indexed, no dict lookups);
    # shared banks' (keys >= SHARED_KEY) in the tile's dicts.
    core_banks = chip.core_chip(cid).banks
    wd = [0] * core_banks.virtual_ids  # last write completes
    md = [0] * core_banks.virtual_ids  # last MSET completes
    ad = [0] * core_banks.virtual_ids  # last access completes
    twd, tmd, tad = tile.wd, tile.md, tile.ad
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
    tr = trace
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
        D = dfloor
        if core_free > D:
            D = core_free
        if release > D:
            D = release
        if kind == CORE:
            end = D + lat
            core_free = end
            if lat:
                busy_s.append(D)
                busy_e.append(end)
            n_core += 1
            core_cycles += lat
            if end > K:
                K = end
            if tr is not None:
                tr.add(cid, rec, seq, R, D, D, end, op_names)
            if not solo:
                horizon = yield max(core_free, release)
            continue
        n_instr += 1
        if len(rob) == R and rob[0] > D:
            st_rob += rob[0] - D
            D = rob[0]
        if w1:
            dfloor = D + 1
        else:
            disp.append(D)
            if len(disp) == w:
                dfloor = disp[0] + 1
        if solo:
            horizon = D
        if kind == MVIN or kind == MVOUT:
            _, pc, lat, unit, rkeys, wkeys, rmw, pp, sp, extra, _m = rec
            nb, beats, groups, nbytes, extra_lat = extra
            t0 = D + delay
            t = t0 if t0 > dma_last_issue else dma_last_issue
            if len(dq) == outstanding and dq[0] > t:
                t = dq[0]
            I = t
            if w1:
                while I in iss:
                    I += 1
                iss.add(I)
            else:
                while issued.get(I, 0) >= w:
                    I += 1
                issued[I] = issued.get(I, 0) + 1
            if I > t0:
                if t > t0:
                    st_dma += I - t0
                else:
                    st_front += I - t0
            ready = 0
            for key in rkeys:
                v = wd[key] if key < SHARED_KEY else twd.get(key, 0)
                if v > ready:
                    ready = v
            for key in wkeys:
                v = md[key] if key < SHARED_KEY else tmd.get(key, 0)
                if v > ready:
                    ready = v
            unit_t = dma_last_start
            first_slot = slots[0] if k == 1 else min(slots)
            if first_slot > unit_t:
                unit_t = first_slot
            S = I
            if ready > S or unit_t > S:
                if ready >= unit_t:
                    st_dep += ready - I
                    S = ready
                else:
                    st_dma += unit_t - I
                    S = unit_t
            if len(res) > res_lim:
                floor = ball_last_start if ball_last_start < dma_last_start else dma_last_start
                if floor < D:
                    floor = D
                res = [r for r in res if r[1] > floor]
                res_lim = 2 * len(res) if len(res) > 4 else 8
            S0 = S
            if not sp:
                tot = pp
                end = S + lat
                for rs, re_, rn in res:
                    if re_ > S and rs < end:
                        tot += rn
                if tot > cap:
                    S = _pool_earliest(res, cap, S, lat, pp)
            else:
                S = _pool_earliest(tpool.res, tpool.cap, S, lat, sp)
                shared_conflicts += S > S0
            if S > S0:
                st_chan += S - S0
                conflicts += 1
                chan_wait += S - S0
            if nb == 0:
                C = S
            elif fast_dma:
                C = S + nb * L + beats
                slots[0] = C
                bus.busy += int(-(-beats * bpb // 1))
            elif k == 1:
                req = slots[0] if slots[0] > S else S
                gs = small_groups.get(groups, 0)
                if gs == 0:
                    gs = small_groups[groups] = _small_groups(groups, L, bpb)
                if gs is None:
                    last_end = bursts(bus, req, groups, L, bpb)
                else:  # `_bursts_on_array_bus` without its run path, which these never take
                    bs, be = bus.starts, bus.ends
                    for count, bbeats, occ in gs:
                        for _ in range(count):
                            t = req + L
                            if not be or t > be[-1]:  # the bus is free from t on
                                bs.append(t)
                                be.append(t + occ)
                                bus.busy += occ
                            elif t == be[-1]:
                                be[-1] = t + occ
                                bus.busy += occ
                            else:
                                i = bisect_right(be, t)
                                e = t + occ
                                if bs[i] >= e:  # a free gap at t: `Bus.alloc`'s merge without its search
                                    if i and be[i - 1] == t:
                                        if bs[i] == e:
                                            be[i - 1] = be[i]
                                            del bs[i], be[i]
                                        else:
                                            be[i - 1] = e
                                    elif bs[i] == e:
                                        bs[i] = t
                                    else:
                                        bs.insert(i, t)
                                        be.insert(i, e)
                                    bus.busy += occ
                                else:
                                    t = bus.alloc(t, occ)
                            req = t + bbeats
                    last_end = req
                if last_end is None:
                    C = S
                else:
                    C = slots[0] = last_end
                if C - S > lat - extra_lat:
                    bus_wait += C - S - (lat - extra_lat)
            else:
                req = S
                end_max = S
                bs, be = bus.starts, bus.ends
                for count, bbeats in groups:
                    occ = max(1, int(-(-bbeats * bpb // 1)))
                    for _ in range(count):
                        i = slots.index(min(slots)) if k > 1 else 0
                        if slots[i] > req:
                            req = slots[i]
                        t = req + L
                        if not be or t > be[-1]:  # the bus is free from t on
                            bs.append(t)
                            be.append(t + occ)
                            bus.busy += occ
                        elif t == be[-1]:
                            be[-1] = t + occ
                            bus.busy += occ
                        else:
                            t = bus.alloc(t, occ)
                        end = t + bbeats
                        slots[i] = end
                        if end > end_max:
                            end_max = end
                C = end_max
                if C - S > lat - extra_lat:
                    bus_wait += C - S - (lat - extra_lat)
            C += extra_lat
            dma_last_start = S
            dma_last_issue = I
            dq.append(C)
            if pp and C > S:
                res.append((S, C, pp))
            if sp:
                tpool.hold(S, C, sp, horizon)
            if C > S:
                busy_s.append(S)
                busy_e.append(C)
                dma_s.append(S)
                dma_e.append(C)
            dma_sum += C - S
        elif kind == BALL:
            _, pc, lat, unit, rkeys, wkeys, rmw, pp, sp, _x, _m = rec
            t0 = D + delay
            t = t0 if t0 > ball_last_issue else ball_last_issue
            if len(bq) == Q and bq[0] > t:
                t = bq[0]
            I = t
            if w1:
                while I in iss:
                    I += 1
                iss.add(I)
            else:
                while issued.get(I, 0) >= w:
                    I += 1
                issued[I] = issued.get(I, 0) + 1
            if I > t0:
                if t > t0:
                    st_bq += I - t0
                else:
                    st_front += I - t0
            ready = 0
            for key in rkeys:
                v = wd[key] if key < SHARED_KEY else twd.get(key, 0)
                if v > ready:
                    ready = v
            for key in wkeys:
                v = md[key] if key < SHARED_KEY else tmd.get(key, 0)
                if v > ready:
                    ready = v
                if rmw:
                    v = wd[key] if key < SHARED_KEY else twd.get(key, 0)
                    if v > ready:
                        ready = v
            unit_t = ball_free[unit]
            if ball_last_start > unit_t:
                unit_t = ball_last_start
            S = I
            if ready > S or unit_t > S:
                if ready >= unit_t:
                    st_dep += ready - I
                    S = ready
                else:
                    st_bq += unit_t - I
                    S = unit_t
            if pp or sp:
                if len(res) > res_lim:
                    floor = ball_last_start if ball_last_start < dma_last_start else dma_last_start
                    if floor < D:
                        floor = D
                    res = [r for r in res if r[1] > floor]
                    res_lim = 2 * len(res) if len(res) > 4 else 8
                S0 = S
                if not sp:
                    tot = pp
                    end = S + lat
                    for rs, re_, rn in res:
                        if re_ > S and rs < end:
                            tot += rn
                    if tot > cap:
                        S = _pool_earliest(res, cap, S, lat, pp)
                else:
                    by_shared = False
                    for _ in range(64):
                        t1 = _pool_earliest(res, cap, S, lat, pp) if pp else S
                        t2 = _pool_earliest(tpool.res, tpool.cap, t1, lat, sp)
                        by_shared |= t2 > t1
                        if t2 == S:
                            break
                        S = t2
                    shared_conflicts += by_shared
                if S > S0:
                    st_chan += S - S0
                    conflicts += 1
                    chan_wait += S - S0
            C = S + lat
            ball_free[unit] = C
            ball_last_start = S
            ball_last_issue = I
            bq.append(S)
            ball_ops[unit] += 1
            ball_busy[unit] += lat
            if pp and C > S:
                res.append((S, C, pp))
            if sp:
                tpool.hold(S, C, sp, horizon)
            if lat:
                busy_s.append(S)
                busy_e.append(C)
        elif kind == MSET:
            _, pc, lat, alloc, rkeys, wkeys, rmw, pp, sp, phys, _m = rec
            t0 = D + delay
            I = t0
            if w1:
                while I in iss:
                    I += 1
                iss.add(I)
            else:
                while issued.get(I, 0) >= w:
                    I += 1
                issued[I] = issued.get(I, 0) + 1
            if I > t0:
                st_front += I - t0
            key = wkeys[0]
            ready = ad[key]
            if alloc:
                for p in phys:
                    v = phys_free[p]
                    if v > ready:
                        ready = v
            S = I
            if ready > S:
                st_dep += ready - S
                S = ready
            C = S + lat
            wd[key] = md[key] = ad[key] = C
            if not alloc:
                for p in phys:
                    phys_free[p] = C
            if lat:
                busy_s.append(S)
                busy_e.append(C)
            rkeys = wkeys = ()
        elif kind == FENCE:
            I = S = D
            C = (D if D > K else K) + lat
            st_fence += C - D
            release = C
            if lat:
                busy_s.append(C - lat)
                busy_e.append(C)
            rkeys = wkeys = ()
        elif kind == BARRIER:
            arrival = D if D > K else K
            Rel = yield ("barrier", arrival)
            I = S = D
            C = Rel
            st_bar += Rel - D
            if bar_cycles:
                busy_s.append(Rel - bar_cycles)
                busy_e.append(Rel)
            release = Rel
            rkeys = wkeys = ()
        # results of the instruction (a Ball op's or a transfer's: the others' keys are empty here)
        for key in wkeys:
            if key < SHARED_KEY:
                wd[key] = C
                if ad[key] < C:
                    ad[key] = C
            else:
                twd[key] = C
                if tad.get(key, 0) < C:
                    tad[key] = C
        for key in rkeys:
            if key < SHARED_KEY:
                if ad[key] < C:
                    ad[key] = C
            elif tad.get(key, 0) < C:
                tad[key] = C
        if C > K:
            K = C
        rob.append(K)
        if tr is not None:
            tr.add(cid, rec, seq, R, I, S, C, op_names)
        seq += 1
        if (seq & 4095) == 0:
            if len(iss) > 4096:
                iss = {x for x in iss if x >= D}
            if len(issued) > 4096:
                issued = {x: v for x, v in issued.items() if x >= D}
        if not solo:
            nd = dfloor
            if core_free > nd:
                nd = core_free
            if release > nd:
                nd = release
            if ahead and kind != BARRIER:
                # Still the earliest core: go on as the driver would resume it.
                if heap:
                    top = heap[0]
                    h = top[0]
                    if nd > h or (nd == h and cid > top[1]):
                        horizon = yield nd
                        continue
                    horizon = h if h < nd else nd
                else:
                    horizon = nd
                if (seq & 15) == 0:
                    prune(horizon)
            else:
                horizon = yield nd
    times.cycles = max(K, core_free, release)
    times.instructions = n_instr
    times.core_ops = n_core
    times.core_op_cycles = core_cycles
    st = times.stalls
    for name, v in (("rob_full", st_rob), ("frontend", st_front), ("dependence", st_dep), ("ball_queue", st_bq),
                    ("channel", st_chan), ("dma", st_dma), ("fence", st_fence), ("barrier", st_bar)):
        st[name] += v
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
    n = len(records)
    n_balls = len(chip.balls)
    times = [CoreTimes(n_balls) for _ in range(n)]
    tsz = chip.cores.tile_size
    n_tiles = -(-max(n, 1) // tsz)
    tiles = [Tile(chip.shared_memory.channels) for _ in range(n_tiles)]
    bus = ArrayBus() if bus is None else bus  # a `Bus` for the list-based reference (tests)
    active = [c for c in range(n) if records[c]]
    solo = len(active) <= 1
    bar_cycles = chip.front_end.barrier_cycles
    heap: list = []
    if proc is None:
        procs = {c: _core_proc(c, records[c], chip, times[c], tiles[c // tsz], bus, solo, trace, op_names, heap)
                 for c in active}
    else:
        procs = {c: proc(c, records[c], chip, times[c], tiles[c // tsz], bus, solo, trace, op_names) for c in active}
    members = {t: [c for c in range(t * tsz, min((t + 1) * tsz, n)) if c in procs] for t in range(n_tiles)}
    waiting: dict[int, dict[int, int]] = {}
    for c, g in procs.items():
        g.send(None)
        heap.append((0, c))
    heapq.heapify(heap)
    count = 0

    def deliver(c: int, value) -> None:
        """Resume core c with `value`; queue it again, or handle its barrier arrival."""
        stack = [(c, value)]
        while stack:
            x, v = stack.pop()
            try:
                msg = procs[x].send(v)
            except StopIteration:
                continue
            if type(msg) is not tuple:
                heapq.heappush(heap, (msg if msg is not None else 0, x))
                continue
            tile = x // tsz
            w = waiting.setdefault(tile, {})
            w[x] = msg[1]
            if len(w) == len(members[tile]):
                rel = max(w.values()) + bar_cycles
                del waiting[tile]
                for y in sorted(w, reverse=True):
                    stack.append((y, rel))

    heappop, heappush = heapq.heappop, heapq.heappush
    while heap:
        t_c, c = heappop(heap)
        g = procs[c]
        # Run core c for as long as it stays the earliest (same order as one heap step an
        # instruction, without the heap traffic).
        while True:
            horizon = heap[0][0] if heap and heap[0][0] < t_c else t_c
            try:
                msg = g.send(horizon)
            except StopIteration:
                break
            count += 1
            if count & 15 == 0:  # a search, and past 32 intervals a memmove: cheap on arrays
                bus.prune(horizon)
            if type(msg) is tuple:  # at a barrier
                tile = c // tsz
                w = waiting.setdefault(tile, {})
                w[c] = msg[1]
                if len(w) == len(members[tile]):
                    rel = max(w.values()) + bar_cycles
                    del waiting[tile]
                    for y in sorted(w):
                        deliver(y, rel)
                break
            if heap and (msg, c) > heap[0]:
                heappush(heap, (msg, c))
                break
            t_c = msg
    if waiting:
        stuck = {t: sorted(w) for t, w in waiting.items()}
        raise ProgramError(f"cores wait at a barrier that other cores of their tile never reach: {stuck}")
    return times, bus.busy
