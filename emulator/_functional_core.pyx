# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# distutils: language = c++
"""The functional pass compiled: `emulator.machine.Machine.run`'s field check and its loop over a
core's instructions, with MVIN, MVOUT, FENCE, BARRIER and the matrix Ball done here on the
bank memory's bytes (private banks), and every other instruction, or one of these in any
other shape, handed to the Python handler (`Machine.handlers`), which stays the reference.

`Core` reads a core's instructions once into a C table (each field straight from the frozen
dataclass's slot, no attribute lookups), checking every field's width as
`emulator.isa.Layout.check_all` does. A fast path checks everything that could make the Python
handler raise, or take another branch, before it changes anything, and leaves the whole
instruction to the handler (errors included) if any check fails. What it does is the
handler's branch step for step: the same records for the timing pass, the same counters
(summed here and added to the machine's lists when the stretch ends: they are sums), the
same deferred matrix chains (kept here, in C, `_functional_kernels.h`, and applied before
anything else touches their bank: before any handler runs, and when the stretch ends).
Tests compare DRAM images, bank bytes, counters and records with the Python loop
(``DSE_EMULATOR_CORE=python``).

The chains' product kernels (int8 VNNI, the previous int16 VNNI, AVX2, the previous AVX2,
plain C: the best this CPU runs, chosen at load) are reachable here by name, `use_kernel` and `matmul_nt`, for the
tests and benchmarks that set them side by side.
"""

cimport cython
cimport numpy as cnp
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint64_t
from libcpp.vector cimport vector

from types import MemberDescriptorType

import numpy as np

from .isa import ACCELERATOR_CLASSES, Barrier, Fence, Matmul, Mvin, Mvout
from .machine import BALL, BARRIER, FENCE, MVIN, MVOUT

cnp.import_array()

ctypedef int64_t i64

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    bint PyLong_CheckExact(PyObject* o)
    bint PyBool_Check(PyObject* o)
    long long PyLong_AsLongLongAndOverflow(PyObject* o, int* overflow) except? -1
    PyObject* PyList_GET_ITEM(object lst, Py_ssize_t i)
    PyTypeObject* Py_TYPE(object o)
    object PyLong_FromSsize_t(Py_ssize_t v)

cdef extern from "_functional_kernels.h" namespace "fk":
    cdef cppclass BankChains:
        pass
    size_t pending(BankChains& bc)
    void dma_rows(uint8_t* base, long row_stride, long rb, long col, uint8_t* dram, long stride, long nrows,
                  long last, bint into_bank)
    void flush(BankChains& bc, vector[int32_t]& scratch, uint8_t* base, long row_stride, long rb, long col) nogil
    void chain_add(BankChains& bc, long c_start, long M, long N, long K, bint acc, uint8_t* a_base,
                   long a_col, long a_start, uint8_t* b_base, long b_col, long b_start, long row_stride, long rb)
    int N_KERNELS
    const char* const kernel_names[]
    int kernel_now "fk::kernel"
    bint kernel_runs(int k)
    bint set_kernel "fk::use_kernel"(int k)
    long round64(long n)
    void product_split(int32_t* p, const uint8_t* a, const int8_t* b, long cap, long M, long N, long K, int k,
                       long min_macs) nogil
    long split_macs "fk::split_macs"

_U8 = np.uint8

# Decoded kinds (the table's first column); K_OTHER goes to the handler.
cdef enum:
    K_OTHER = 0
    K_MVIN = 1
    K_MVOUT = 2
    K_MATMUL = 3
    K_FENCE = 4
    K_BARRIER = 5

cdef enum:
    F = 12  # table columns: kind, then up to 11 fields
    NGEO = 4  # transfer geometries remembered a bank
    NLAT = 8  # matrix-Ball latencies remembered

_DATAFLOWS = ("os", "ws", "is")  # `emulator.isa._DATAFLOW`'s codes


cdef Py_ssize_t _slot(cls, str name) except -1:
    """Byte offset of a slot of a slotted dataclass in its instances."""
    d = cls.__dict__.get(name)
    if type(d) is not MemberDescriptorType:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    return (<PyMemberDescrObject*><PyObject*>d).d_member.offset


cdef inline PyObject* _get(object o, Py_ssize_t off):
    return (<PyObject**>((<char*><PyObject*>o) + off))[0]


cdef inline bint _int(PyObject* p, i64* v) noexcept:
    """An exact int (or bool) in int64's range into v; False for anything else."""
    cdef int ovf = 0
    if p == NULL or not (PyLong_CheckExact(p) or PyBool_Check(p)):
        return False
    v[0] = PyLong_AsLongLongAndOverflow(p, &ovf)
    return ovf == 0


# Slot offsets of the fields the fast paths read (per class, in table order).
_MV_FIELDS = ("bank", "addr", "iter", "stride")
_MM_FIELDS = ("a", "b", "c", "M", "N", "K", "a_row", "b_row", "c_row")
cdef Py_ssize_t mvin_off[4]
cdef Py_ssize_t mvout_off[4]
cdef Py_ssize_t mm_off[9]
cdef Py_ssize_t mm_acc_off, mm_df_off
for _i, _n in enumerate(_MV_FIELDS):
    mvin_off[_i] = _slot(Mvin, _n)
    mvout_off[_i] = _slot(Mvout, _n)
for _i, _n in enumerate(_MM_FIELDS):
    mm_off[_i] = _slot(Matmul, _n)
mm_acc_off = _slot(Matmul, "accumulate")
mm_df_off = _slot(Matmul, "dataflow")


@cython.final
cdef class _Checks:
    """Each instruction class's integer fields (slot offset, largest value) under one layout,
    `Layout._int_fields` read once; classes with a field the C check cannot judge (an fp32
    scale in a narrow field) ask `Layout.fast`."""

    cdef list types  # the classes, in lookup order
    cdef vector[vector[Py_ssize_t]] offs
    cdef vector[vector[uint64_t]] maxes
    cdef vector[int] others
    cdef dict fast

    def __cinit__(self, lay):
        self.types = []
        self.fast = lay.fast
        order = (Mvin, Matmul, Mvout, Fence, Barrier) + tuple(c for c in ACCELERATOR_CLASSES
                                                               if c not in (Mvin, Matmul, Mvout, Fence, Barrier))
        cdef vector[Py_ssize_t] o
        cdef vector[uint64_t] mx
        cdef int judged_elsewhere
        for cls in order:
            names, maxes, others = lay._int_fields[cls]
            o.clear()
            mx.clear()
            for name, m in zip(names, maxes):
                o.push_back(_slot(cls, name))
                mx.push_back(<uint64_t>int(m))
            self.types.append(cls)
            self.offs.push_back(o)
            self.maxes.push_back(mx)
            judged_elsewhere = 1 if others else 0
            self.others.push_back(judged_elsewhere)


cdef struct Geo:
    i64 it, stride  # the key: beats and effective stride
    i64 nrows, last, span, nb, nbytes
    PyObject* lat  # the record's objects (kept alive by Core.keep)
    PyObject* extra
    PyObject* pp
    PyObject* sp


cdef struct Bank:
    PyObject* obj  # the machine's `_Bank` this is read from (a reference in Core.refs)
    i64 b0, col, rows, W, key
    PyObject* keytup  # (key,)
    int n_in, n_out
    Geo gin[NGEO]
    Geo gout[NGEO]


cdef struct Lat:
    i64 df, M, N, K
    PyObject* lat


@cython.final
cdef class Core:
    """One core's instructions decoded and checked, its fast paths' state across stretches."""

    cdef object m, lay, handlers
    cdef int c
    cdef list instrs, vmap, refs, keep, bursts, bytes_in, bytes_out, transfers_in, transfers_out, macs
    cdef vector[i64] tab
    cdef vector[Py_ssize_t] barriers
    cdef public Py_ssize_t bad  # the first instruction with a field that does not fit, or -1
    cdef bint ok, functional, py_chains
    cdef Py_ssize_t vids, rb, row_stride, img_size
    cdef uint8_t* mem
    cdef uint8_t* img
    cdef vector[Bank] banks
    cdef vector[BankChains] chains
    cdef vector[int] chained  # banks with chains
    cdef vector[int32_t] scratch
    cdef vector[i64] drd, dwr
    cdef i64 dbursts, dbytes_in, dbytes_out, dtin, dtout, dmacs
    cdef object matrix, ball_id, matrix_ports, fence_rec_lat, pair
    cdef i64 pair_a, pair_b
    cdef Py_ssize_t acc_col
    cdef Lat lats[NLAT]
    cdef int n_lat

    def __cinit__(self, m, int c, list instrs, _Checks checks):
        self.m, self.c, self.instrs = m, c, instrs
        self.handlers = m.handlers
        cdef cnp.ndarray mem = m.mem[c]
        cdef cnp.ndarray img = m.img
        self.rb = m.rb
        self.ok = (not m.trace and cnp.PyArray_IS_C_CONTIGUOUS(mem) and cnp.PyArray_IS_C_CONTIGUOUS(img)
                   and mem.ndim == 3 and img.ndim == 1 and mem.dtype == _U8 and img.dtype == _U8
                   and self.rb % 4 == 0)
        self.functional = m.functional
        self.vids = m.vids_of[c]
        self.vmap = m.vmap[c]
        self.mem = <uint8_t*>cnp.PyArray_DATA(mem)
        self.row_stride = mem.shape[1] * mem.shape[2]
        self.img = <uint8_t*>cnp.PyArray_DATA(img)
        self.img_size = img.shape[0]
        self.bursts, self.bytes_in, self.bytes_out = m.bursts, m.bytes_in, m.bytes_out
        self.transfers_in, self.transfers_out, self.macs = m.transfers_in, m.transfers_out, m.macs
        self.matrix = m._matrix_of[c]
        self.ball_id = self.matrix[0] if self.matrix is not None else None
        self.acc_col = m._acc_col_of[c]
        self.matrix_ports = m._matrix_ports
        self.fence_rec_lat = m.chip.front_end.fence_cycles
        self.refs, self.keep = [None] * self.vids, []
        cdef Bank empty
        empty.obj = NULL
        self.banks.assign(self.vids, empty)
        self.chains.resize(self.vids)
        nphys = len(m.rows_read[c])
        self.drd.assign(nphys, 0)
        self.dwr.assign(nphys, 0)
        self.pair = None
        self.bad = self.decode(checks)

    # ------------------------------------------------------------------ decoding and checks
    cdef Py_ssize_t decode(self, _Checks checks) except -2:
        """Fill the table; the first instruction whose fields do not all fit, or -1."""
        cdef Py_ssize_t n = len(self.instrs), pc, j, ci, nt = len(checks.types)
        cdef Py_ssize_t bad = -1
        cdef list types = checks.types
        cdef PyTypeObject* t
        cdef i64 v
        cdef i64* row
        cdef bint fits, exact
        cdef PyObject* p
        cdef Py_ssize_t* offs
        self.tab.assign(n * F, 0)
        cdef PyTypeObject* t_mvin = <PyTypeObject*>Mvin
        cdef PyTypeObject* t_mvout = <PyTypeObject*>Mvout
        cdef PyTypeObject* t_mm = <PyTypeObject*>Matmul
        cdef PyTypeObject* t_fence = <PyTypeObject*>Fence
        cdef PyTypeObject* t_bar = <PyTypeObject*>Barrier
        for pc in range(n):
            ins = self.instrs[pc]
            t = Py_TYPE(ins)
            ci = -1
            for j in range(nt):
                if <PyObject*>t == PyList_GET_ITEM(types, j):
                    ci = j
                    break
            if ci < 0:  # a core op: no fields to check, the handler runs it
                continue
            if t == t_bar:
                self.barriers.push_back(pc)
            fits = exact = True
            for j in range(<Py_ssize_t>checks.offs[ci].size()):
                if _int(_get(ins, checks.offs[ci][j]), &v):
                    if v < 0 or <uint64_t>v > checks.maxes[ci][j]:
                        fits = False
                else:
                    exact = False
            if not exact or checks.others[ci]:  # values the C check cannot judge: the layout's own
                fits = checks.fast[<object>t](ins)
            if not fits:
                if bad < 0:
                    bad = pc
                continue
            if not exact:
                continue  # odd values (numpy ints, ...): the handler
            row = &self.tab[pc * F]
            if t == t_mvin or t == t_mvout:
                offs = &mvin_off[0] if t == t_mvin else &mvout_off[0]
                for j in range(4):
                    _int(_get(ins, offs[j]), &row[1 + j])
                row[0] = K_MVIN if t == t_mvin else K_MVOUT
            elif t == t_mm:
                for j in range(9):
                    _int(_get(ins, mm_off[j]), &row[1 + j])
                p = _get(ins, mm_acc_off)
                if p == NULL:
                    continue
                row[10] = 1 if <object>p else 0
                p = _get(ins, mm_df_off)
                if p == NULL:
                    continue
                df = <object>p
                row[11] = 0 if df == "os" else 1 if df == "ws" else 2 if df == "is" else -1
                if row[11] >= 0:
                    row[0] = K_MATMUL
            elif t == t_fence:
                row[0] = K_FENCE
            elif t == t_bar:
                row[0] = K_BARRIER
        return bad

    def segments(self) -> list:
        """The stretches between barriers: [(lo, hi)], each up to and with its BARRIER, then the rest."""
        out = []
        cdef Py_ssize_t start = 0
        for pc in self.barriers:
            out.append((start, pc + 1))
            start = pc + 1
        out.append((start, len(self.instrs)))
        return out

    # ------------------------------------------------------------------ banks
    cdef Bank* bank(self, i64 bid) except? NULL:
        """The private bank `bid` as it is now, or NULL (unallocated, or not a private id)."""
        if bid < 0 or bid >= self.vids:
            return NULL
        cdef PyObject* e = PyList_GET_ITEM(self.vmap, bid)
        if e == <PyObject*>None:
            return NULL
        cdef Bank* b = &self.banks[bid]
        if b.obj == e:
            return b
        o = <object>e  # allocated anew (an MSET, by its handler): read it again
        if o.shared:
            return NULL
        b.obj = e
        b.b0, b.col, b.rows, b.W, b.key = o.b0, o.col, o.rows, o.width, o.key
        kt = (o.key,)
        self.refs[bid] = (o, kt)
        b.keytup = <PyObject*>kt
        b.n_in = b.n_out = 0
        return b

    cdef void flush_bank(self, i64 bid) noexcept:
        cdef Bank* b = &self.banks[bid]
        if pending(self.chains[bid]):
            with nogil:  # the products (on two threads if large) need no Python
                flush(self.chains[bid], self.scratch, self.mem + b.b0 * self.rb, self.row_stride, self.rb, b.col)

    cdef void flush_all(self) noexcept:
        cdef size_t i
        for i in range(self.chained.size()):
            self.flush_bank(self.chained[i])
        self.chained.clear()

    cdef inline void count(self, vector[i64]& lst, Bank* b, i64 lines) noexcept:
        """`Machine._count` of lines 0 .. lines - 1 (rows touched in each physical bank)."""
        cdef i64 q, x, col = b.col
        if col == 1:
            lst[b.b0] += (lines + 0)
            return
        for q in range(col):
            x = lines - 1 - q
            lst[b.b0 + q] += (x // col if x >= 0 else -1) + 1  # floor division

    cdef Geo* geo(self, Bank* b, bint out, i64 it, i64 stride, ins) except? NULL:
        """A transfer's geometry into or out of bank b, computed (and `Machine._dma_geo`
        asked) once; NULL if it overflows the bank (the handler raises)."""
        cdef Geo* g = &b.gout[0] if out else &b.gin[0]
        cdef int n = b.n_out if out else b.n_in, i
        for i in range(n):
            if g[i].it == it and g[i].stride == stride:
                return &g[i]
        cdef i64 nrows = (it + b.col - 1) // b.col
        if nrows > b.rows:
            return NULL
        i = n if n < NGEO else (it & (NGEO - 1))
        if n < NGEO:
            if out:
                b.n_out += 1
            else:
                b.n_in += 1
        g = &g[i]
        g.it, g.stride, g.nrows = it, stride, nrows
        g.last = it - (nrows - 1) * b.col if nrows else 0
        g.span = (nrows - 1) * stride + g.last * self.rb if nrows else -(1 << 62)
        lat, extra, (pp, sp) = self.m._dma_geo(ins, <object>b.obj, nrows, g.last, stride)
        self.keep.append((lat, extra, pp, sp))
        g.lat, g.extra, g.pp, g.sp = <PyObject*>lat, <PyObject*>extra, <PyObject*>pp, <PyObject*>sp
        g.nb, g.nbytes = extra[0], extra[3]
        return g

    # ------------------------------------------------------------------ instructions
    cdef object mvin(self, Py_ssize_t pc, i64* f, ins):
        """`Machine._mvin` for a private bank; None for anything else."""
        cdef Bank* b = self.bank(f[1])
        if b == NULL:
            return None
        cdef i64 addr = f[2], it = f[3], stride = f[4] or b.W
        cdef Geo* g = self.geo(b, False, it, stride, ins)
        if g == NULL or addr + g.span > self.img_size:
            return None
        if pending(self.chains[f[1]]):
            self.flush_bank(f[1])
        cdef i64 p, n = it * self.rb
        if b.col == 1:
            self.dwr[b.b0] += g.nrows
        elif g.last == b.col:
            for p in range(b.b0, b.b0 + b.col):
                self.dwr[p] += g.nrows
        else:
            self.count(self.dwr, b, it)
        if self.functional and n:
            dma_rows(self.mem + b.b0 * self.rb, self.row_stride, self.rb, b.col, self.img + addr, stride, g.nrows,
                     g.last, True)
        self.dbursts += g.nb
        self.dbytes_in += n
        self.dtin += 1
        return (MVIN, PyLong_FromSsize_t(pc), <object>g.lat, 0, (), <object>b.keytup, False, <object>g.pp,
                <object>g.sp, <object>g.extra, None)

    cdef object mvout(self, Py_ssize_t pc, i64* f, ins):
        """`Machine._mvout` from a private bank; None for anything else."""
        cdef Bank* b = self.bank(f[1])
        if b == NULL:
            return None
        cdef i64 addr = f[2], it = f[3], raw = f[4]
        cdef i64 stride = raw or b.W
        cdef i64 nrows = (it + b.col - 1) // b.col
        if raw and raw < b.W and nrows > 1:
            return None
        cdef Geo* g = self.geo(b, True, it, stride, ins)
        if g == NULL or addr + (g.span if nrows else 0) > self.img_size:
            return None
        if pending(self.chains[f[1]]):
            self.flush_bank(f[1])
        cdef i64 p, n = it * self.rb
        if b.col == 1:
            self.drd[b.b0] += nrows
        elif n % b.W == 0:
            for p in range(b.b0, b.b0 + b.col):
                self.drd[p] += nrows
        else:
            self.count(self.drd, b, it)
        if self.functional and n:
            dma_rows(self.mem + b.b0 * self.rb, self.row_stride, self.rb, b.col, self.img + addr, stride, nrows,
                     g.last, False)
        self.dbursts += g.nb
        self.dbytes_out += g.nbytes
        self.dtout += 1
        return (MVOUT, PyLong_FromSsize_t(pc), <object>g.lat, 0, <object>b.keytup, (), False, <object>g.pp,
                <object>g.sp, <object>g.extra, None)

    cdef PyObject* latency(self, i64* f) except? NULL:
        """The matrix Ball's latency for this shape and dataflow if the machine has it (the
        handler computes and checks it the first time)."""
        cdef int i
        for i in range(self.n_lat):
            if (self.lats[i].df == f[11] and self.lats[i].M == f[4] and self.lats[i].N == f[5]
                    and self.lats[i].K == f[6]):
                return self.lats[i].lat
        lat = self.m._lat_cache.get((id(self.matrix[1]), _DATAFLOWS[f[11]], f[4], f[5], f[6]))
        if lat is None:
            return NULL
        self.keep.append(lat)
        i = self.n_lat if self.n_lat < NLAT else (f[6] & (NLAT - 1))
        if self.n_lat < NLAT:
            self.n_lat += 1
        self.lats[i].df, self.lats[i].M, self.lats[i].N, self.lats[i].K = f[11], f[4], f[5], f[6]
        self.lats[i].lat = <PyObject*>lat
        return <PyObject*>lat

    cdef object matmul(self, Py_ssize_t pc, i64* f):
        """`Machine._matmul` with A, B and C in private banks, A and B single-column or whole
        bank rows, C whole rows, its latency already known; None otherwise."""
        if self.matrix is None:
            return None
        cdef i64 M = f[4], N = f[5], K = f[6], rb = self.rb
        if M < 1 or N < 1 or K < 1 or K % rb or N % (self.acc_col * rb // 4):
            return None
        cdef Bank* ea = self.bank(f[1])
        cdef Bank* eb = self.bank(f[2])
        cdef Bank* ec = self.bank(f[3])
        if ea == NULL or eb == NULL or ec == NULL or ec.col % self.acc_col:
            return None
        cdef i64 ca = ea.col, cb = eb.col, cc = ec.col, Wa = ea.W, Wb = eb.W, Wc = ec.W
        cdef i64 a_start = f[7] * Wa, b_start = f[8] * Wb, c_start = f[9] * Wc
        cdef i64 na = M * K, nb = N * K, nc = M * N * 4
        # `Machine._access`'s row counts: a single-column bank's lines, or whole rows of a wider one
        if (ca != 1 and na % Wa) or (cb != 1 and nb % Wb):
            return None
        cdef i64 ra0 = a_start // Wa, ra1 = (a_start + na + Wa - 1) // Wa
        cdef i64 rb0 = b_start // Wb, rb1 = (b_start + nb + Wb - 1) // Wb
        if ra1 > ea.rows or rb1 > eb.rows:
            return None
        if c_start % Wc or nc % Wc:
            return None
        cdef i64 r0 = c_start // Wc, r1 = r0 + nc // Wc
        if r1 > ec.rows:
            return None
        cdef PyObject* lat = self.latency(f)
        if lat == NULL:
            return None
        cdef bint acc = f[10]
        self.dmacs += M * N * K
        if pending(self.chains[f[1]]):
            self.flush_bank(f[1])
        if pending(self.chains[f[2]]):
            self.flush_bank(f[2])
        cdef i64 dr, p
        dr = ra1 - ra0
        for p in range(ea.b0, ea.b0 + ca):
            self.drd[p] += dr
        dr = rb1 - rb0
        for p in range(eb.b0, eb.b0 + cb):
            self.drd[p] += dr
        dr = r1 - r0
        for p in range(ec.b0, ec.b0 + cc):
            if acc:
                self.drd[p] += dr
            self.dwr[p] += dr
        if self.functional:
            if not pending(self.chains[f[3]]):
                self.chained.push_back(f[3])
            chain_add(self.chains[f[3]], c_start, M, N, K, acc, self.mem + ea.b0 * rb, ca, a_start,
                      self.mem + eb.b0 * rb, cb, b_start, self.row_stride, rb)
        if ea.key == eb.key:
            rk = <object>ea.keytup
        else:
            if self.pair is None or self.pair_a != ea.key or self.pair_b != eb.key:
                self.pair, self.pair_a, self.pair_b = (ea.key, eb.key), ea.key, eb.key
            rk = self.pair
        return (BALL, PyLong_FromSsize_t(pc), <object>lat, self.ball_id, rk, <object>ec.keytup,
                acc or c_start != 0, self.matrix_ports, 0, None, None)

    # ------------------------------------------------------------------ the loop
    def run(self, Py_ssize_t lo, Py_ssize_t hi, list out):
        """Execute instructions lo .. hi - 1 (no BARRIER among them but the last), appending
        their timing records to `out`, as `Machine.run`'s loop does."""
        cdef Py_ssize_t pc
        cdef i64* f
        cdef i64 kind
        cdef list instrs = self.instrs
        handlers = self.handlers
        c = self.c
        try:
            for pc in range(lo, hi):
                f = &self.tab[pc * F]
                kind = f[0] if self.ok else K_OTHER
                rec = None
                if kind != K_OTHER and self.py_chains:  # a handler's matmul left chains: apply them first
                    self.m._flush_all()
                    self.py_chains = False
                if kind == K_MVIN:
                    rec = self.mvin(pc, f, instrs[pc])
                elif kind == K_MATMUL:
                    rec = self.matmul(pc, f)
                elif kind == K_MVOUT:
                    rec = self.mvout(pc, f, instrs[pc])
                elif kind == K_FENCE:
                    rec = (FENCE, PyLong_FromSsize_t(pc), self.fence_rec_lat, 0, (), (), False, 0, 0, None, None)
                elif kind == K_BARRIER:
                    rec = (BARRIER, PyLong_FromSsize_t(pc), 0, 0, (), (), False, 0, 0, None, None)
                if rec is None:
                    self.flush_all()  # the handler sees the banks as the Python loop leaves them
                    ins = instrs[pc]
                    t = type(ins)
                    rec = handlers[t](self.m, c, pc, ins)
                    if t is Matmul:
                        self.py_chains = True
                out.append(rec)
        finally:
            self.flush_all()
            self.settle()

    cdef void settle(self) except *:
        """Add the counters summed here to the machine's."""
        cdef Py_ssize_t p
        c = self.c
        rd, wr = self.m.rows_read[c], self.m.rows_written[c]
        for p in range(<Py_ssize_t>self.drd.size()):
            if self.drd[p]:
                rd[p] += self.drd[p]
                self.drd[p] = 0
            if self.dwr[p]:
                wr[p] += self.dwr[p]
                self.dwr[p] = 0
        self.bursts[c] += self.dbursts
        self.bytes_in[c] += self.dbytes_in
        self.bytes_out[c] += self.dbytes_out
        self.transfers_in[c] += self.dtin
        self.transfers_out[c] += self.dtout
        self.macs[c] += self.dmacs
        self.dbursts = self.dbytes_in = self.dbytes_out = self.dtin = self.dtout = self.dmacs = 0


def cores(m) -> list:
    """A `Core` for each of the machine's instruction lists (decoded and checked)."""
    checks = _Checks(m.layout)
    return [Core(m, c, instrs, checks) for c, instrs in enumerate(m.program.cores)]


# ---------------------------------------------------------------------- the product kernels
KERNELS = tuple(kernel_names[i].decode() for i in range(N_KERNELS))  # in order of preference


def kernels() -> list:
    """The product kernels this CPU runs, best first (`_functional_kernels.h`)."""
    return [name for i, name in enumerate(KERNELS) if kernel_runs(i)]


def kernel_in_use() -> str:
    """The kernel the chains' products run on: the best of `kernels()`, "avx2" with
    DSE_EMULATOR_NO_VNNI set, or the last `use_kernel` named."""
    return KERNELS[kernel_now]


def use_kernel(str name) -> str:
    """Run the chains' products on kernel `name` from now on (for side-by-side tests and
    benchmarks; every kernel gives the same bits); the kernel it replaces."""
    was = kernel_in_use()
    if name not in KERNELS or not set_kernel(KERNELS.index(name)):
        raise ValueError(f"kernel {name!r}: this CPU runs {', '.join(kernels())}")
    return was


def matmul_nt(a, b, str name=None, int repeat=1, split=None, row_bytes=None) -> np.ndarray:
    """a @ b.T (int8 M x K and N x K) in int32 with wraparound, by kernel `name` (default: the
    one in use), the operands laid out as a chain keeps them (A + 128 as u8, rows 64-byte
    aligned): the kernels on their own, for tests and benchmarks (which time `repeat` runs of
    the product alone). `split`: on two threads from this many multiply-adds (0: always,
    None: from `split_threshold()`, as the chains). `row_bytes`: the operand rows' length (the
    kernels' `cap`: a multiple of 64, at least K; default K rounded up to 64), as a chain's
    buffers longer than its K terms; the bytes past K are random (no kernel may add them in)."""
    cdef cnp.ndarray a8 = np.ascontiguousarray(a, dtype=np.int8)
    cdef cnp.ndarray b8 = np.ascontiguousarray(b, dtype=np.int8)
    if a8.ndim != 2 or b8.ndim != 2 or a8.shape[1] != b8.shape[1]:
        raise ValueError(f"matmul_nt: shapes {np.shape(a)} and {np.shape(b)} (want M x K and N x K)")
    cdef long M = a8.shape[0], N = b8.shape[0], K = a8.shape[1], cap = round64(K)
    if row_bytes is not None:
        if row_bytes < K or row_bytes % 64:
            raise ValueError(f"matmul_nt: row_bytes {row_bytes} (want a multiple of 64, at least K = {K})")
        cap = row_bytes
    cdef int k = kernel_now
    if name is not None:
        if name not in KERNELS or not kernel_runs(KERNELS.index(name)):
            raise ValueError(f"kernel {name!r}: this CPU runs {', '.join(kernels())}")
        k = KERNELS.index(name)
    # 64-byte aligned rows of cap bytes (a view into a slightly larger buffer)
    cdef cnp.ndarray ab = np.empty(M * cap + N * cap + 64, np.uint8)
    cdef long off = (64 - <size_t>cnp.PyArray_DATA(ab) % 64) % 64
    cdef cnp.ndarray ua = ab[off:off + M * cap].reshape(M, cap)
    cdef cnp.ndarray ub = ab[off + M * cap:off + (M + N) * cap].reshape(N, cap)
    ua[:, :K] = a8.view(np.uint8) ^ np.uint8(0x80)
    ub[:, :K] = b8.view(np.uint8)
    pad = np.random.default_rng(cap).integers(0, 256, (M + N, cap - K), dtype=np.uint8)
    ua[:, K:], ub[:, K:] = pad[:M], pad[M:]
    cdef cnp.ndarray p = np.empty((M, N), np.int32)
    cdef int r, n = max(repeat, 1) if M and N else 0
    cdef long min_macs = -1 if split is None else max(int(split), 0)
    cdef int32_t* pp = <int32_t*>cnp.PyArray_DATA(p)
    cdef const uint8_t* pa = <const uint8_t*>cnp.PyArray_DATA(ua)
    cdef const int8_t* pb = <const int8_t*>cnp.PyArray_DATA(ub)
    with nogil:
        for r in range(n):
            product_split(pp, pa, pb, cap, M, N, K, k, min_macs)
    return p


def split_threshold(macs=None) -> int:
    """The chains' products run on two threads from this many multiply-adds; with `macs`,
    set it (for tests and benchmarks: 0 splits every product of two rows or more), and the
    threshold it replaces."""
    global split_macs
    was = split_macs
    if macs is not None:
        split_macs = max(int(macs), 0)
    return was
