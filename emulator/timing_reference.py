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
    wd: dict[int, int] = {}
    md: dict[int, int] = {}
    ad: dict[int, int] = {}
    twd, tmd, tad = tile.wd, tile.md, tile.ad
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
    tr = trace
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
        if kind == BALL:
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
                v = wd.get(key, 0) if key < SHARED_KEY else twd.get(key, 0)
                if v > ready:
                    ready = v
            for key in wkeys:
                v = md.get(key, 0) if key < SHARED_KEY else tmd.get(key, 0)
                if v > ready:
                    ready = v
                if rmw:
                    v = wd.get(key, 0) if key < SHARED_KEY else twd.get(key, 0)
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
                if len(res) > 16:
                    res = [r for r in res if r[1] > D]
                S0 = S
                if not sp:
                    tot = pp
                    end = S + lat
                    for r in res:
                        if r[1] > S and r[0] < end:
                            tot += r[2]
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
        elif kind == MVIN or kind == MVOUT:
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
                v = wd.get(key, 0) if key < SHARED_KEY else twd.get(key, 0)
                if v > ready:
                    ready = v
            for key in wkeys:
                v = md.get(key, 0) if key < SHARED_KEY else tmd.get(key, 0)
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
            if len(res) > 16:
                res = [r for r in res if r[1] > D]
            S0 = S
            if not sp:
                tot = pp
                end = S + lat
                for r in res:
                    if r[1] > S and r[0] < end:
                        tot += r[2]
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
                last_end = bursts(bus, slots[0] if slots[0] > S else S, groups, L, bpb)
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
            ready = ad.get(key, 0)
            if alloc:
                for p in phys:
                    v = phys_free.get(p, 0)
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
        # results of the instruction
        if kind == BALL or kind == MVIN or kind == MVOUT:
            for key in wkeys:
                if key < SHARED_KEY:
                    wd[key] = C
                    if ad.get(key, 0) < C:
                        ad[key] = C
                else:
                    twd[key] = C
                    if tad.get(key, 0) < C:
                        tad[key] = C
            for key in rkeys:
                a = ad if key < SHARED_KEY else tad
                if a.get(key, 0) < C:
                    a[key] = C
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
