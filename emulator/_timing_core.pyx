# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# distutils: language = c++
"""The overlapped timing pass compiled: `emulator.timing.run_overlapped` on the same records,
cycle for cycle (tests compare every counter, trace line and the bus's busy cycles with the
Python model, `emulator.timing_reference` and `emulator.timing`).

The Python model is kept as the reference; this is a port of its per-core loop
(`emulator.timing_reference.core_proc_reference`) and its driver, with each core's state in
a `Core` object instead of a generator's locals. The driver is the reference's: always step
the core with the smallest (next dispatch bound, core id), one instruction a step, so the
shared resources (the system bus, a tile's shared-memory channels and banks) see requests
in the same order. Pruning (bus intervals, channel reservations, issue slots) only drops
what no later request can meet, as in Python: where it happens does not change a cycle.
Traces are logged as (core, record, seq, I, S, C) in processing order and handed to the
Python trace sink afterwards, so their lines are the Python model's own.
"""

cimport cython
from cpython.object cimport PyObject
from libc.math cimport ceil
from libc.stdint cimport int64_t
from libcpp.algorithm cimport sort
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair
from libcpp.vector cimport vector

import numpy as np

ctypedef int64_t i64

cdef extern from "_timing_sets.h":
    cdef cppclass CycleSet:
        size_t size()
        i64 take_from(i64 I)
        void keep_from(i64 floor)

# Record kinds (`emulator.machine`'s; `emulator.timing_core` checks them when it loads this).
cdef enum:
    K_MSET = 0
    K_MVIN = 1
    K_MVOUT = 2
    K_BALL = 3
    K_FENCE = 4
    K_BARRIER = 5
    K_CORE = 6

cdef enum:
    SHARED = 1 << 20  # `emulator.machine.SHARED_KEY`
    DCACHE = 16  # the record decoder's cache of shared key tuples and transfer fields

KINDS = (K_MSET, K_MVIN, K_MVOUT, K_BALL, K_FENCE, K_BARRIER, K_CORE)
SHARED_KEY = SHARED

# What a step of a core ends with.
cdef enum:
    YIELDED = 0  # its next dispatch bound is in `nd`
    AT_BARRIER = 1  # its arrival is in `arrival`
    DONE = 2


cdef struct Rec:
    int kind
    int unit  # Ball index; an MSET's alloc flag
    int rmw
    int pp
    int sp
    int nr  # keys[k0 : k0 + nr] read, then nw written
    int nw
    int np_  # an MSET's physical banks: keys[p0 : p0 + np_]
    int ng  # a transfer's burst groups: groups[g0 : g0 + ng]
    int k0
    int p0
    int g0
    i64 lat
    i64 nb
    i64 beats
    i64 extra_lat


cdef struct Group:
    i64 count
    i64 beats
    i64 occ  # bus cycles a burst holds: max(1, ceil(beats * bytes a beat / bus bytes a cycle))


cdef struct Res:
    i64 s
    i64 e
    i64 n


cdef inline i64 ceil_occ(i64 beats, double bpb) noexcept:
    # Python's ``int(-(-beats * bpb // 1))``: the same double product, rounded up.
    return <i64>ceil(<double>beats * bpb)


cdef bint _fits(vector[Res]& res, i64 cap, i64 t, i64 end) noexcept:
    """Whether the pool's use stays <= cap over [t, end) (use only rises at starts)."""
    cdef i64 u = 0
    cdef size_t i, j, m = res.size()
    cdef i64 p
    for i in range(m):
        if res[i].s <= t < res[i].e:
            u += res[i].n
    if u > cap:
        return False
    for j in range(m):
        p = res[j].s
        if t < p < end:
            u = 0
            for i in range(m):
                if res[i].s <= p < res[i].e:
                    u += res[i].n
            if u > cap:
                return False
    return True


cdef i64 _pool_earliest(vector[Res]& res, i64 cap, i64 t0, i64 dur, i64 need) except -1:
    """Earliest t >= t0 at which `need` more units of a pool of `cap` are free for [t, t+dur)."""
    if dur <= 0 or res.size() == 0:
        return t0
    cap -= need
    cdef i64 total = 0
    cdef i64 end = t0 + dur
    cdef size_t i, m = res.size()
    for i in range(m):
        if res[i].e > t0 and res[i].s < end:
            total += res[i].n
    if total <= cap or _fits(res, cap, t0, end):
        return t0
    cdef vector[i64] ends
    for i in range(m):
        if res[i].e > t0:
            ends.push_back(res[i].e)
    sort(ends.begin(), ends.end())
    cdef i64 prev = -1
    cdef i64 t
    for i in range(ends.size()):
        t = ends[i]
        if i and t == prev:
            continue
        prev = t
        if _fits(res, cap, t, t + dur):
            return t
    raise AssertionError("a pool never frees")


@cython.final
cdef class Shared:
    """What every core touches: the system bus (sorted, disjoint busy intervals: a burst takes
    the first free gap, as `emulator.timing.Bus.alloc`) and the trace log."""

    cdef vector[i64] bs
    cdef vector[i64] be
    cdef size_t hint  # where the last burst went: the next one (the same transfer's) is near it
    cdef i64 busy
    cdef bint tracing
    cdef vector[i64] log  # (core, record index, seq, I, S, C) a traced instruction

    cdef size_t upper(self, i64 t, size_t m) noexcept:
        """bisect_right(ends, t) for m > 0 intervals, galloping from `hint`: a transfer's
        bursts land one after another among thousands of intervals (a Llama layer's bus
        holds ~3,600), and a binary search from scratch was most of the timing pass."""
        cdef size_t h = self.hint if self.hint < m else m - 1
        cdef size_t lo, hi, step = 1
        if self.be[h] > t:  # the answer is at or before h
            hi = h
            while hi >= step and self.be[hi - step] > t:
                hi -= step
                step <<= 1
            lo = 0 if hi < step else hi - step + 1
        else:  # after h
            lo = h + 1
            while lo + step - 1 < m and self.be[lo + step - 1] <= t:
                lo += step
                step <<= 1
            hi = lo + step - 1 if lo + step - 1 < m else m
        return self.bisect_right(t, lo, hi)

    cdef inline size_t bisect_right(self, i64 t, size_t lo, size_t hi) noexcept:
        """bisect_right(ends[lo:hi], t) + lo: the first interval ending after t."""
        cdef size_t mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if t < self.be[mid]:
                hi = mid
            else:
                lo = mid + 1
        return lo

    cdef inline i64 alloc(self, i64 t, i64 n) noexcept:
        """The first t' >= t with [t', t' + n) free; taken. Inline: a transfer's bursts mostly
        go after everything reserved (a call each was a fifth of the timing pass)."""
        cdef size_t m = self.bs.size()
        self.busy += n
        if m == 0 or t > self.be[m - 1]:  # after everything reserved: append
            self.bs.push_back(t)
            self.be.push_back(t + n)
            self.hint = m
            return t
        if t == self.be[m - 1]:
            self.be[m - 1] = t + n
            self.hint = m - 1
            return t
        return self.alloc_gap(t, n, m)

    cdef i64 alloc_gap(self, i64 t, i64 n, size_t m) noexcept:
        """`alloc` before the last interval's end: the first gap that fits, from bisect_right(ends, t)."""
        cdef size_t i
        cdef i64 e
        i = self.upper(t, m)
        while i < m and self.bs[i] < t + n:
            if self.be[i] > t:
                t = self.be[i]
            i += 1
        e = t + n
        if i > 0 and self.be[i - 1] == t:
            if i < m and self.bs[i] == e:
                self.be[i - 1] = self.be[i]
                self.bs.erase(self.bs.begin() + i)
                self.be.erase(self.be.begin() + i)
            else:
                self.be[i - 1] = e
        elif i < m and self.bs[i] == e:
            self.bs[i] = t
        else:
            self.bs.insert(self.bs.begin() + i, t)
            self.be.insert(self.be.begin() + i, e)
        self.hint = i
        return t

    cdef void prune(self, i64 horizon) noexcept:
        """Drop the intervals that end at or before `horizon` (no request comes before it)."""
        cdef size_t lo = self.bisect_right(horizon, 0, self.be.size())
        if lo > 32:
            self.bs.erase(self.bs.begin(), self.bs.begin() + lo)
            self.be.erase(self.be.begin(), self.be.begin() + lo)
            self.hint = self.hint - lo if self.hint > lo else 0


@cython.final
cdef class Tile:
    """A tile's shared-memory channels and shared banks' dependence times (by shared bank)."""

    cdef vector[Res] pool
    cdef i64 cap
    cdef vector[i64] wd
    cdef vector[i64] md
    cdef vector[i64] ad

    def __cinit__(self, i64 cap, int nkeys):
        self.cap = cap
        self.wd.resize(nkeys, 0)
        self.md.resize(nkeys, 0)
        self.ad.resize(nkeys, 0)

    cdef void hold(self, i64 s, i64 e, i64 n, i64 horizon) noexcept:
        cdef vector[Res] kept
        cdef size_t i
        cdef Res r
        if self.pool.size() > 24:
            for i in range(self.pool.size()):
                if self.pool[i].e > horizon:
                    kept.push_back(self.pool[i])
            self.pool.swap(kept)
        if e > s:
            r.s, r.e, r.n = s, e, n
            self.pool.push_back(r)


@cython.final
cdef class Ring:
    """A deque of at most `cap` values (Python's ``deque(maxlen=cap)``): `front` the oldest."""

    cdef vector[i64] buf
    cdef int cap
    cdef int head
    cdef int n

    def __cinit__(self, int cap):
        self.cap = cap
        self.buf.resize(cap if cap > 0 else 1, 0)
        self.head = 0
        self.n = 0

    cdef inline void push(self, i64 x) noexcept:
        if self.n < self.cap:
            self.buf[(self.head + self.n) % self.cap] = x
            self.n += 1
        else:
            self.buf[self.head] = x
            self.head = (self.head + 1) % self.cap

    cdef inline bint full(self) noexcept:
        return self.n == self.cap

    cdef inline i64 front(self) noexcept:
        return self.buf[self.head]


@cython.final
cdef class Core:
    """One core's overlapped timing: `core_proc_reference`'s locals, stepped an instruction
    at a time by the driver."""

    # program
    cdef int cid
    cdef vector[Rec] recs
    cdef vector[i64] keys
    cdef vector[Group] groups
    cdef size_t pos
    cdef bint started
    # chip
    cdef bint solo
    cdef bint w1
    cdef int w
    cdef int R
    cdef i64 delay
    cdef i64 bar_cycles
    cdef int k
    cdef i64 L
    cdef double bpb
    cdef bint fast_dma
    cdef i64 cap
    cdef Shared sh
    cdef Tile tile
    # state
    cdef i64 K, core_free, release, dfloor, horizon, seq
    cdef Ring disp, rob, bq, dq
    cdef CycleSet iss
    cdef unordered_map[i64, int] issued
    cdef i64 ball_last_issue, ball_last_start, dma_last_issue, dma_last_start
    cdef vector[i64] ball_free, slots, wd, md, ad, phys_free
    cdef vector[Res] res
    cdef size_t res_lim
    cdef public i64 nd, arrival
    # results
    cdef i64 st_rob, st_front, st_dep, st_bq, st_chan, st_dma, st_fence, st_bar
    cdef i64 n_instr, n_core, core_cycles, conflicts, chan_wait, bus_wait, dma_sum, shared_conflicts
    cdef vector[i64] busy_s, busy_e, dma_s, dma_e, ball_ops, ball_busy

    def __cinit__(self, int cid, list recs, chip, Shared sh, Tile tile, bint solo):
        fe, dma = chip.front_end, chip.dma
        core_banks = chip.core_chip(cid).banks
        n_balls = len(chip.balls)
        self.cid = cid
        self.sh, self.tile, self.solo = sh, tile, solo
        self.w = fe.issue_per_cycle
        self.w1 = self.w == 1
        self.R = fe.rob_entries
        self.delay = fe.issue_delay
        self.bar_cycles = fe.barrier_cycles
        self.k = min(dma.bursts_in_flight, dma.inflight_requests)
        self.L = dma.latency_cycles
        self.bpb = dma.beat_bytes / dma.system_bus_bytes
        self.fast_dma = solo and self.k == 1
        self.cap = core_banks.channels
        self.disp, self.rob = Ring(self.w), Ring(self.R)
        self.bq, self.dq = Ring(fe.ball_queue_depth), Ring(dma.outstanding)
        self.ball_free.resize(n_balls, 0)
        self.ball_ops.resize(n_balls, 0)
        self.ball_busy.resize(n_balls, 0)
        self.slots.resize(self.k, 0)
        self.res_lim = 8
        self._decode(recs, core_banks.virtual_ids, core_banks.count)

    cdef _decode(self, list recs, int vids, int nphys):
        """The records' fields in C structs (keys, physical banks and burst groups in pools).
        Records share their key tuples and transfer fields (the functional pass makes one a
        bank, one a transfer geometry): a pair of key tuples, or a transfer's fields, seen
        again points at the pool entries made the first time (a small cache by identity;
        the records hold the objects alive)."""
        cdef Rec r
        cdef Group g
        cdef tuple rec, ks, kw, ex, gr
        cdef i64 key, top_key = vids - 1, top_phys = nphys - 1
        cdef int i, h
        cdef PyObject* kc_r[DCACHE]
        cdef PyObject* kc_w[DCACHE]
        cdef int kc_k0[DCACHE]
        cdef PyObject* xc[DCACHE]
        cdef Rec xc_rec[DCACHE]
        for i in range(DCACHE):
            kc_r[i] = kc_w[i] = xc[i] = NULL
        self.recs.reserve(len(recs))
        for rec in recs:
            r.kind = rec[0]
            r.lat = rec[2]
            r.unit = rec[3]
            r.rmw = 1 if rec[6] else 0
            r.pp = rec[7]
            r.sp = rec[8]
            r.nr = r.nw = r.np_ = r.ng = 0
            r.k0 = self.keys.size()
            r.p0 = r.g0 = 0
            r.nb = r.beats = r.extra_lat = 0
            if r.kind == K_BALL or r.kind == K_MVIN or r.kind == K_MVOUT or r.kind == K_MSET:
                ks, kw = rec[4], rec[5]
                r.nr, r.nw = len(ks), len(kw)
                h = ((<size_t><PyObject*>ks >> 4) ^ (<size_t><PyObject*>kw >> 6)) & (DCACHE - 1)
                if r.kind != K_MSET and kc_r[h] == <PyObject*>ks and kc_w[h] == <PyObject*>kw:
                    r.k0 = kc_k0[h]
                else:
                    for key in ks:
                        self.keys.push_back(key)
                    for key in kw:
                        self.keys.push_back(key)
                    for i in range(r.k0, r.k0 + r.nr + r.nw):
                        key = self.keys[i]
                        if key < SHARED and key > top_key:
                            top_key = key
                    kc_r[h], kc_w[h], kc_k0[h] = <PyObject*>ks, <PyObject*>kw, r.k0
            if r.kind == K_MVIN or r.kind == K_MVOUT:
                ex = rec[9]
                h = (<size_t><PyObject*>ex >> 4) & (DCACHE - 1)
                if xc[h] == <PyObject*>ex:
                    r.nb, r.beats, r.extra_lat = xc_rec[h].nb, xc_rec[h].beats, xc_rec[h].extra_lat
                    r.g0, r.ng = xc_rec[h].g0, xc_rec[h].ng
                else:
                    r.nb, r.beats, r.extra_lat = ex[0], ex[1], ex[4]
                    r.g0 = self.groups.size()
                    for gr in ex[2]:
                        g.count, g.beats = gr[0], gr[1]
                        g.occ = ceil_occ(g.beats, self.bpb)
                        if g.occ < 1:
                            g.occ = 1
                        self.groups.push_back(g)
                    r.ng = self.groups.size() - r.g0
                    xc[h] = <PyObject*>ex
                    xc_rec[h] = r
            elif r.kind == K_MSET:
                r.p0 = self.keys.size()
                for key in rec[9]:
                    self.keys.push_back(key)
                    if key > top_phys:
                        top_phys = key
                r.np_ = self.keys.size() - r.p0
            self.recs.push_back(r)
        self.wd.resize(top_key + 1, 0)
        self.md.resize(top_key + 1, 0)
        self.ad.resize(top_key + 1, 0)
        self.phys_free.resize(top_phys + 1, 0)

    cdef inline i64 issue_slot(self, i64 I) noexcept:
        """The first cycle from I with an issue slot free; takes it."""
        cdef unordered_map[i64, int].iterator it
        if self.w1:
            I = self.iss.take_from(I)
        else:
            while True:
                it = self.issued.find(I)
                if it == self.issued.end():
                    self.issued[I] = 1
                    break
                if self.issued[I] < self.w:
                    self.issued[I] += 1
                    break
                I += 1
        return I

    cdef inline i64 key_time(self, vector[i64]& own, vector[i64]& shared, i64 key) noexcept:
        if key < SHARED:
            return own[key]
        return shared[key - SHARED]

    cdef void prune_res(self, i64 D) noexcept:
        """Drop channel reservations no later Ball or DMA start can meet (both start in order
        per queue, never before the dispatch D)."""
        cdef i64 floor = self.ball_last_start if self.ball_last_start < self.dma_last_start else self.dma_last_start
        cdef vector[Res] kept
        cdef size_t i
        if floor < D:
            floor = D
        for i in range(self.res.size()):
            if self.res[i].e > floor:
                kept.push_back(self.res[i])
        self.res.swap(kept)
        self.res_lim = 2 * self.res.size() if self.res.size() > 4 else 8

    cdef inline void hold_private(self, i64 s, i64 e, i64 n) noexcept:
        cdef Res r
        r.s, r.e, r.n = s, e, n
        self.res.push_back(r)

    cdef inline i64 private_use(self, i64 S, i64 end) noexcept:
        cdef i64 tot = 0
        cdef size_t i
        for i in range(self.res.size()):
            if self.res[i].e > S and self.res[i].s < end:
                tot += self.res[i].n
        return tot

    cdef inline void log(self, size_t idx, i64 seq, i64 I, i64 S, i64 C) noexcept:
        cdef vector[i64]* lg = &self.sh.log
        lg.push_back(self.cid)
        lg.push_back(idx)
        lg.push_back(seq)
        lg.push_back(I)
        lg.push_back(S)
        lg.push_back(C)

    cdef int step(self, i64 horizon) except -1:
        """Time the next instruction (resumed with `horizon`, as the reference's ``send``):
        YIELDED with the next dispatch bound in `nd`, AT_BARRIER with `arrival`, or DONE."""
        cdef Rec* r
        cdef i64 D, end, t0, t, I, S, S0, C, ready, v, unit_t, key, req, end_max, tot, t1, t2, first_slot
        cdef i64 last_end
        cdef int i, j, kind, islot
        cdef i64 cnt
        cdef bint by_shared, have_end
        cdef Group* g
        cdef Tile tile = self.tile
        cdef Shared sh = self.sh
        if self.started and not self.solo:  # solo: the horizon is each instruction's D
            self.horizon = horizon
        self.started = True
        if self.pos >= self.recs.size():
            return DONE
        r = &self.recs[self.pos]
        kind = r.kind
        D = self.dfloor
        if self.core_free > D:
            D = self.core_free
        if self.release > D:
            D = self.release
        if kind == K_CORE:
            end = D + r.lat
            self.core_free = end
            if r.lat:
                self.busy_s.push_back(D)
                self.busy_e.push_back(end)
            self.n_core += 1
            self.core_cycles += r.lat
            if end > self.K:
                self.K = end
            if sh.tracing:
                self.log(self.pos, self.seq, D, D, end)
            self.pos += 1
            self.nd = self.core_free if self.core_free > self.release else self.release
            return YIELDED
        self.n_instr += 1
        if self.rob.full() and self.rob.front() > D:
            self.st_rob += self.rob.front() - D
            D = self.rob.front()
        if self.w1:
            self.dfloor = D + 1
        else:
            self.disp.push(D)
            if self.disp.full():
                self.dfloor = self.disp.front() + 1
        if self.solo:
            self.horizon = D
        if kind == K_BALL:
            t0 = D + self.delay
            t = t0 if t0 > self.ball_last_issue else self.ball_last_issue
            if self.bq.full() and self.bq.front() > t:
                t = self.bq.front()
            I = self.issue_slot(t)
            if I > t0:
                if t > t0:
                    self.st_bq += I - t0
                else:
                    self.st_front += I - t0
            ready = 0
            for i in range(r.nr):
                v = self.key_time(self.wd, tile.wd, self.keys[r.k0 + i])
                if v > ready:
                    ready = v
            for i in range(r.nr, r.nr + r.nw):
                key = self.keys[r.k0 + i]
                v = self.key_time(self.md, tile.md, key)
                if v > ready:
                    ready = v
                if r.rmw:
                    v = self.key_time(self.wd, tile.wd, key)
                    if v > ready:
                        ready = v
            unit_t = self.ball_free[r.unit]
            if self.ball_last_start > unit_t:
                unit_t = self.ball_last_start
            S = I
            if ready > S or unit_t > S:
                if ready >= unit_t:
                    self.st_dep += ready - I
                    S = ready
                else:
                    self.st_bq += unit_t - I
                    S = unit_t
            if r.pp or r.sp:
                if self.res.size() > self.res_lim:
                    self.prune_res(D)
                S0 = S
                if not r.sp:
                    tot = r.pp + self.private_use(S, S + r.lat)
                    if tot > self.cap:
                        S = _pool_earliest(self.res, self.cap, S, r.lat, r.pp)
                else:
                    by_shared = False
                    for j in range(64):
                        t1 = _pool_earliest(self.res, self.cap, S, r.lat, r.pp) if r.pp else S
                        t2 = _pool_earliest(tile.pool, tile.cap, t1, r.lat, r.sp)
                        if t2 > t1:
                            by_shared = True
                        if t2 == S:
                            break
                        S = t2
                    self.shared_conflicts += by_shared
                if S > S0:
                    self.st_chan += S - S0
                    self.conflicts += 1
                    self.chan_wait += S - S0
            C = S + r.lat
            self.ball_free[r.unit] = C
            self.ball_last_start = S
            self.ball_last_issue = I
            self.bq.push(S)
            self.ball_ops[r.unit] += 1
            self.ball_busy[r.unit] += r.lat
            if r.pp and C > S:
                self.hold_private(S, C, r.pp)
            if r.sp:
                tile.hold(S, C, r.sp, self.horizon)
            if r.lat:
                self.busy_s.push_back(S)
                self.busy_e.push_back(C)
            self.results(r, C)
        elif kind == K_MVIN or kind == K_MVOUT:
            t0 = D + self.delay
            t = t0 if t0 > self.dma_last_issue else self.dma_last_issue
            if self.dq.full() and self.dq.front() > t:
                t = self.dq.front()
            I = self.issue_slot(t)
            if I > t0:
                if t > t0:
                    self.st_dma += I - t0
                else:
                    self.st_front += I - t0
            ready = 0
            for i in range(r.nr):
                v = self.key_time(self.wd, tile.wd, self.keys[r.k0 + i])
                if v > ready:
                    ready = v
            for i in range(r.nr, r.nr + r.nw):
                v = self.key_time(self.md, tile.md, self.keys[r.k0 + i])
                if v > ready:
                    ready = v
            unit_t = self.dma_last_start
            first_slot = self.slots[0]
            for i in range(1, self.k):
                if self.slots[i] < first_slot:
                    first_slot = self.slots[i]
            if first_slot > unit_t:
                unit_t = first_slot
            S = I
            if ready > S or unit_t > S:
                if ready >= unit_t:
                    self.st_dep += ready - I
                    S = ready
                else:
                    self.st_dma += unit_t - I
                    S = unit_t
            if self.res.size() > self.res_lim:
                self.prune_res(D)
            S0 = S
            if not r.sp:
                tot = r.pp + self.private_use(S, S + r.lat)
                if tot > self.cap:
                    S = _pool_earliest(self.res, self.cap, S, r.lat, r.pp)
            else:
                S = _pool_earliest(tile.pool, tile.cap, S, r.lat, r.sp)
                self.shared_conflicts += S > S0
            if S > S0:
                self.st_chan += S - S0
                self.conflicts += 1
                self.chan_wait += S - S0
            if r.nb == 0:
                C = S
            elif self.fast_dma:
                C = S + r.nb * self.L + r.beats
                self.slots[0] = C
                sh.busy += ceil_occ(r.beats, self.bpb)
            elif self.k == 1:
                req = self.slots[0] if self.slots[0] > S else S
                have_end = False
                for i in range(r.ng):
                    g = &self.groups[r.g0 + i]
                    for cnt in range(g.count):
                        t = sh.alloc(req + self.L, g.occ)
                        req = t + g.beats
                        have_end = True
                if have_end:
                    C = self.slots[0] = req
                else:
                    C = S
                if C - S > r.lat - r.extra_lat:
                    self.bus_wait += C - S - (r.lat - r.extra_lat)
            else:
                req = S
                end_max = S
                for i in range(r.ng):
                    g = &self.groups[r.g0 + i]
                    for cnt in range(g.count):
                        islot = 0  # the first slot free (`slots.index(min(slots))`)
                        for j in range(1, self.k):
                            if self.slots[j] < self.slots[islot]:
                                islot = j
                        if self.slots[islot] > req:
                            req = self.slots[islot]
                        t = sh.alloc(req + self.L, g.occ)
                        end = t + g.beats
                        self.slots[islot] = end
                        if end > end_max:
                            end_max = end
                C = end_max
                if C - S > r.lat - r.extra_lat:
                    self.bus_wait += C - S - (r.lat - r.extra_lat)
            C += r.extra_lat
            self.dma_last_start = S
            self.dma_last_issue = I
            self.dq.push(C)
            if r.pp and C > S:
                self.hold_private(S, C, r.pp)
            if r.sp:
                tile.hold(S, C, r.sp, self.horizon)
            if C > S:
                self.busy_s.push_back(S)
                self.busy_e.push_back(C)
                self.dma_s.push_back(S)
                self.dma_e.push_back(C)
            self.dma_sum += C - S
            self.results(r, C)
        elif kind == K_MSET:
            t0 = D + self.delay
            I = self.issue_slot(t0)
            if I > t0:
                self.st_front += I - t0
            key = self.keys[r.k0 + r.nr]  # the bank: its one written key
            ready = self.ad[key]
            if r.unit:  # an allocation waits for the free of its physical banks
                for i in range(r.np_):
                    v = self.phys_free[self.keys[r.p0 + i]]
                    if v > ready:
                        ready = v
            S = I
            if ready > S:
                self.st_dep += ready - S
                S = ready
            C = S + r.lat
            self.wd[key] = C
            self.md[key] = C
            self.ad[key] = C
            if not r.unit:
                for i in range(r.np_):
                    self.phys_free[self.keys[r.p0 + i]] = C
            if r.lat:
                self.busy_s.push_back(S)
                self.busy_e.push_back(C)
        elif kind == K_FENCE:
            I = S = D
            C = (D if D > self.K else self.K) + r.lat
            self.st_fence += C - D
            self.release = C
            if r.lat:
                self.busy_s.push_back(C - r.lat)
                self.busy_e.push_back(C)
        elif kind == K_BARRIER:
            self.arrival = D if D > self.K else self.K
            self.nd = D  # kept for `finish_barrier`
            return AT_BARRIER
        else:
            raise ValueError(f"core {self.cid}: record {self.pos} has unknown kind {kind}")
        self.retire(I, S, C, D)
        return YIELDED

    cdef void results(self, Rec* r, i64 C) noexcept:
        """A Ball op's or a transfer's results: written banks' and accessed banks' times."""
        cdef int i
        cdef i64 key
        cdef Tile tile = self.tile
        for i in range(r.nr, r.nr + r.nw):
            key = self.keys[r.k0 + i]
            if key < SHARED:
                self.wd[key] = C
                if self.ad[key] < C:
                    self.ad[key] = C
            else:
                key -= SHARED
                tile.wd[key] = C
                if tile.ad[key] < C:
                    tile.ad[key] = C
        for i in range(r.nr):
            key = self.keys[r.k0 + i]
            if key < SHARED:
                if self.ad[key] < C:
                    self.ad[key] = C
            else:
                key -= SHARED
                if tile.ad[key] < C:
                    tile.ad[key] = C

    cdef void retire(self, i64 I, i64 S, i64 C, i64 D) noexcept:
        """In-order commit, the trace, and the next dispatch bound."""
        cdef unordered_map[i64, int] kept_n
        cdef i64 x, nd
        cdef pair[i64, int] kv
        if C > self.K:
            self.K = C
        self.rob.push(self.K)
        if self.sh.tracing:
            self.log(self.pos, self.seq, I, S, C)
        self.pos += 1
        self.seq += 1
        if (self.seq & 4095) == 0:  # issue slots before D are never asked for again
            if self.iss.size() > 4096:
                self.iss.keep_from(D)
            if self.issued.size() > 4096:
                for kv in self.issued:
                    if kv.first >= D:
                        kept_n.insert(kv)
                self.issued.swap(kept_n)
        nd = self.dfloor
        if self.core_free > nd:
            nd = self.core_free
        if self.release > nd:
            nd = self.release
        self.nd = nd

    cdef void finish_barrier(self, i64 rel) noexcept:
        """The BARRIER at `pos` released at `rel` (the tile's last arrival + barrier cycles)."""
        cdef i64 D = self.nd
        self.st_bar += rel - D
        if self.bar_cycles:
            self.busy_s.push_back(rel - self.bar_cycles)
            self.busy_e.push_back(rel)
        self.release = rel
        self.retire(D, D, rel, D)

    def fill(self, times):
        """Write the results into `times` (an `emulator.timing.CoreTimes`)."""
        times.cycles = max(self.K, self.core_free, self.release)
        times.instructions = self.n_instr
        times.core_ops = self.n_core
        times.core_op_cycles = self.core_cycles
        st = times.stalls
        for name, v in (("rob_full", self.st_rob), ("frontend", self.st_front), ("dependence", self.st_dep),
                        ("ball_queue", self.st_bq), ("channel", self.st_chan), ("dma", self.st_dma),
                        ("fence", self.st_fence), ("barrier", self.st_bar)):
            st[name] += v
        times.channel_conflicts = self.conflicts
        times.shared_channel_conflicts = self.shared_conflicts
        times.channel_wait = self.chan_wait
        times.bus_wait = self.bus_wait
        times.dma_latency_sum = self.dma_sum
        times.busy_s, times.busy_e = _array(self.busy_s), _array(self.busy_e)
        times.dma_s, times.dma_e = _array(self.dma_s), _array(self.dma_e)
        times.ball_ops = [int(x) for x in self.ball_ops]
        times.ball_busy = [int(x) for x in self.ball_busy]


cdef object _array(vector[i64]& v):
    out = np.empty(v.size(), dtype=np.int64)
    cdef i64[::1] view = out
    cdef size_t i
    for i in range(v.size()):
        view[i] = v[i]
    return out


def run_overlapped(list records, chip, times, trace=None, op_names=None):
    """Fill `times` (a `CoreTimes` a core) as `emulator.timing.run_overlapped` does; return the
    system bus's busy cycles. Raises `ProgramError` for cores stuck at a barrier."""
    from .errors import ProgramError

    cdef int n = len(records)
    cdef int tsz = chip.cores.tile_size
    cdef int n_tiles = (max(n, 1) + tsz - 1) // tsz
    cdef i64 bar_cycles = chip.front_end.barrier_cycles
    cdef Shared sh = Shared()
    sh.tracing = trace is not None
    sm = chip.shared_memory
    tiles = [Tile(sm.channels, sm.banks) for _ in range(n_tiles)]
    active = [c for c in range(n) if records[c]]
    cdef bint solo = len(active) <= 1
    cores = {c: Core(c, records[c], chip, sh, tiles[c // tsz], solo) for c in active}
    members = {t: [c for c in range(t * tsz, min((t + 1) * tsz, n)) if c in cores] for t in range(n_tiles)}
    cdef Core core, other
    cdef int st, m = len(active), i, best, c
    cdef i64 bt, t_c, rel, t2
    cdef int c2
    cdef i64 count = 0
    # The driver's heap as arrays: a core's next dispatch bound, and whether it is in the heap.
    cdef vector[i64] bound
    cdef vector[int] ready
    cdef list order = [cores[c] for c in active]
    waiting = {}
    if solo:
        for core in order:
            while True:
                st = core.step(0)
                while st == YIELDED:
                    st = core.step(0)
                if st == DONE:
                    break
                core.finish_barrier(core.arrival + bar_cycles)  # alone in its tile
    else:
        bound.resize(m, 0)
        ready.resize(m, 1)
        index = {c: i for i, c in enumerate(active)}
        while True:
            best = -1
            for i in range(m):  # the smallest (bound, core): cores are in id order
                if ready[i] and (best < 0 or bound[i] < bound[best]):
                    best = i
            if best < 0:
                break
            t2 = -1  # the smallest of the others: the core runs while it stays below it
            c2 = -1
            for i in range(m):
                if i != best and ready[i] and (c2 < 0 or bound[i] < t2):
                    t2, c2 = bound[i], i
            core = order[best]
            t_c = bound[best]
            while True:
                st = core.step(t_c)
                count += 1
                if count & 15 == 0:
                    sh.prune(t_c)
                if st == DONE:
                    ready[best] = 0
                    break
                if st == AT_BARRIER:
                    ready[best] = 0
                    tile = core.cid // tsz
                    w = waiting.setdefault(tile, {})
                    w[core.cid] = core.arrival
                    if len(w) == len(members[tile]):
                        rel = max(w.values()) + bar_cycles
                        del waiting[tile]
                        for y in sorted(w):
                            other = cores[y]
                            other.finish_barrier(rel)
                            i = index[y]
                            bound[i] = other.nd
                            ready[i] = 1
                    break
                if c2 >= 0 and (core.nd > t2 or (core.nd == t2 and best > c2)):
                    bound[best] = core.nd
                    break
                t_c = core.nd
    if waiting:
        stuck = {t: sorted(w) for t, w in waiting.items()}
        raise ProgramError(f"cores wait at a barrier that other cores of their tile never reach: {stuck}")
    for c in active:
        (<Core>cores[c]).fill(times[c])
    if trace is not None:
        _replay(trace, records, sh.log, chip.front_end.rob_entries, op_names)
    return sh.busy


def run_serial(list records, chip, times, trace=None, op_names=None):
    """Fill `times` as `emulator.timing.run_serial` does: every instruction its latency, one
    after another; a BARRIER waits for the cores of its tile that reach one in the same
    round, then costs ``front_end.barrier_cycles``."""
    cdef int n = len(records), tsz = chip.cores.tile_size, n_balls = len(chip.balls)
    cdef i64 bar_cycles = chip.front_end.barrier_cycles
    cdef i64 R = chip.front_end.rob_entries
    cdef bint tracing = trace is not None
    cdef vector[i64] t, ninstr, ncore, core_cyc, dma_sum, st_bar, lg
    cdef vector[size_t] pos
    cdef vector[vector[i64]] busy_s, busy_e, dma_s, dma_e, ball_ops, ball_busy
    cdef int c, kind, unit
    cdef i64 tc, S, lat, Rel
    cdef size_t p, m
    cdef tuple rec
    cdef list recs
    t.resize(n, 0)
    ninstr.resize(n, 0)
    ncore.resize(n, 0)
    core_cyc.resize(n, 0)
    dma_sum.resize(n, 0)
    st_bar.resize(n, 0)
    pos.resize(n, 0)
    busy_s.resize(n)
    busy_e.resize(n)
    dma_s.resize(n)
    dma_e.resize(n)
    ball_ops.resize(n)
    ball_busy.resize(n)
    for c in range(n):
        ball_ops[c].resize(n_balls, 0)
        ball_busy[c].resize(n_balls, 0)
    active = list(range(n))
    while active:
        arrived = []
        for c in active:
            recs = records[c]
            m = len(recs)
            tc, p = t[c], pos[c]
            while p < m:
                rec = recs[p]
                kind, lat = rec[0], rec[2]
                if kind == K_BARRIER:
                    ninstr[c] += 1
                    arrived.append(c)
                    break
                S = tc
                tc += lat
                if lat:
                    busy_s[c].push_back(S)
                    busy_e[c].push_back(tc)
                if kind == K_BALL:
                    unit = rec[3]
                    ball_ops[c][unit] += 1
                    ball_busy[c][unit] += lat
                elif kind == K_MVIN or kind == K_MVOUT:
                    dma_s[c].push_back(S)
                    dma_e[c].push_back(tc)
                    dma_sum[c] += lat
                if kind == K_CORE:
                    ncore[c] += 1
                    core_cyc[c] += lat
                else:
                    ninstr[c] += 1
                if tracing:
                    lg.push_back(c)
                    lg.push_back(p)
                    lg.push_back(p)
                    lg.push_back(S)
                    lg.push_back(S)
                    lg.push_back(tc)
                p += 1
            t[c], pos[c] = tc, p
        by_tile = {}  # release the barriers, tile by tile (in the order the tiles arrived)
        for c in arrived:
            by_tile.setdefault(c // tsz, []).append(c)
        for cs in by_tile.values():
            Rel = max(t[c] for c in cs) + bar_cycles
            for c in cs:
                st_bar[c] += Rel - t[c]
                if tracing:
                    for v in (c, pos[c], pos[c], t[c], t[c], Rel):
                        lg.push_back(v)
                if bar_cycles:
                    busy_s[c].push_back(Rel - bar_cycles)
                    busy_e[c].push_back(Rel)
                t[c] = Rel
                pos[c] += 1
        active = arrived
    for c in range(n):
        ct = times[c]
        ct.cycles = t[c]
        ct.instructions = ninstr[c]
        ct.core_ops = ncore[c]
        ct.core_op_cycles = core_cyc[c]
        ct.dma_latency_sum = dma_sum[c]
        ct.stalls["barrier"] += st_bar[c]
        ct.busy_s, ct.busy_e = _array(busy_s[c]), _array(busy_e[c])
        ct.dma_s, ct.dma_e = _array(dma_s[c]), _array(dma_e[c])
        ct.ball_ops = [int(x) for x in ball_ops[c]]
        ct.ball_busy = [int(x) for x in ball_busy[c]]
    if tracing:
        _replay(trace, records, lg, R, op_names)


def _replay(trace, list records, vector[i64]& lg, i64 R, op_names):
    """The logged instructions into the Python trace sink, in the order they were timed."""
    cdef size_t i
    cdef int c
    for i in range(0, lg.size(), 6):
        c = lg[i]
        trace.add(c, records[c][lg[i + 1]], lg[i + 2], R, lg[i + 3], lg[i + 4], lg[i + 5], op_names)


def take_slots(list requests):
    """The issue-slot set on its own (for tests): each request is a cycle (take the first
    free cycle from it; the answers are returned in order) or ``("keep_from", floor)``."""
    cdef CycleSet s
    out = []
    for q in requests:
        if type(q) is tuple:
            s.keep_from(q[1])
        else:
            out.append(s.take_from(q))
    return out


def bus_allocs(list requests):
    """The system bus on its own (for tests): each request is ``(t, n)`` (a burst of n cycles
    asked for at t; its start is returned, in order) or ``("prune", horizon)``. Returns the
    starts and the busy intervals left, as `emulator.timing.Bus` gives them."""
    cdef Shared sh = Shared()
    out = []
    for q in requests:
        if q[0] == "prune":
            sh.prune(q[1])
        else:
            out.append(sh.alloc(q[0], q[1]))
    return out, [(sh.bs[i], sh.be[i]) for i in range(sh.bs.size())]
