"""The reference of the overlapped timing's per-core loop: `emulator.timing._core_proc` as it
was before its fast paths (a small transfer's bursts reserved inline, the channel pool
pruned to what a later start can meet, a core running ahead without yielding while it
stays the earliest). Tests run `run_overlapped(..., proc=core_proc_reference)` on
generated programs and require every cycle and counter to be identical."""

from __future__ import annotations

from collections import deque

from .machine import BALL, BARRIER, CORE, FENCE, MSET, MVIN, MVOUT, SHARED_KEY
from .timing import ArrayBus, CoreTimes, Tile, _bursts_on_array_bus, _bursts_one_in_flight, _pool_earliest


def core_proc_reference(cid, recs, chip, times: CoreTimes, tile: Tile, bus, solo: bool, trace, op_names):
    """The overlapped timing of one core, as a generator (its state lives in fast locals).

    Protocol: the first ``send(None)`` starts it. Unless `solo`, it yields the lower bound
    of its next dispatch after each instruction and is resumed with ``send(horizon)`` (no
    core will ever request a shared resource before `horizon`). At a BARRIER it yields
    ``("barrier", arrival)`` and is resumed with ``send(release)``. It returns at the end.
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
    write_done: dict[int, int] = {}
    mset_done: dict[int, int] = {}
    access_done: dict[int, int] = {}
    shared_write_done, shared_mset_done, shared_access_done = tile.write_done, tile.mset_done, tile.access_done
    tpool = tile.pool
    phys_free: dict[int, int] = {}
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
        if kind == BALL:
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
                dep_time = write_done.get(key, 0) if key < SHARED_KEY else shared_write_done.get(key, 0)
                if dep_time > ready:
                    ready = dep_time
            for key in wkeys:
                dep_time = mset_done.get(key, 0) if key < SHARED_KEY else shared_mset_done.get(key, 0)
                if dep_time > ready:
                    ready = dep_time
                if rmw:
                    dep_time = write_done.get(key, 0) if key < SHARED_KEY else shared_write_done.get(key, 0)
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
                if len(res) > 16:
                    res = [held for held in res if held[1] > dispatch]
                start_asked = start
                if not shared_ports:
                    tot = private_ports
                    end = start + lat
                    for held in res:
                        if held[1] > start and held[0] < end:
                            tot += held[2]
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
        elif kind == MVIN or kind == MVOUT:
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
                dep_time = write_done.get(key, 0) if key < SHARED_KEY else shared_write_done.get(key, 0)
                if dep_time > ready:
                    ready = dep_time
            for key in wkeys:
                dep_time = mset_done.get(key, 0) if key < SHARED_KEY else shared_mset_done.get(key, 0)
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
            if len(res) > 16:
                res = [held for held in res if held[1] > dispatch]
            start_asked = start
            if not shared_ports:
                tot = private_ports
                end = start + lat
                for held in res:
                    if held[1] > start and held[0] < end:
                        tot += held[2]
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
                first_request = slots[0] if slots[0] > start else start
                last_end = bursts(bus, first_request, groups, dram_latency, bus_cycles_per_beat)
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
            ready = access_done.get(key, 0)
            if alloc:
                for bank in phys:
                    dep_time = phys_free.get(bank, 0)
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
        # results of the instruction
        if kind == BALL or kind == MVIN or kind == MVOUT:
            for key in wkeys:
                if key < SHARED_KEY:
                    write_done[key] = complete
                    if access_done.get(key, 0) < complete:
                        access_done[key] = complete
                else:
                    shared_write_done[key] = complete
                    if shared_access_done.get(key, 0) < complete:
                        shared_access_done[key] = complete
            for key in rkeys:
                accessed = access_done if key < SHARED_KEY else shared_access_done
                if accessed.get(key, 0) < complete:
                    accessed[key] = complete
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
