# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
# distutils: language = c++
"""The functional pass's hot instructions compiled: `emulator.machine.Machine.run`'s loop over
a stretch of a core's instructions, with MVIN (whole bank rows from one DRAM run) and the
matrix Ball (private banks, operands single-column or whole bank rows, C whole rows) done here on the bank
memory's bytes, and every other instruction, or one of these in any other shape, handed to
the Python handler (`Machine.handlers`), which stays the reference.

A fast path checks everything that could make the Python handler raise, or take another
branch, before it changes anything, and gives up (returns None) if any check fails: the
handler then does the whole instruction, errors included. What it does is the handler's
branch step for step: the same counters, the same deferred matrix chains (`Machine._flush`
applies them), the same record for the timing pass. Tests compare DRAM images, counters
and records with the Python loop (``DSE_EMULATOR_CORE=python``).
"""

cimport numpy as cnp
from libc.string cimport memcpy

import numpy as np

from .isa import Matmul, Mvin
from .machine import _CHAIN_HINT_BYTES, BALL, MVIN

cnp.import_array()

ctypedef unsigned char u8

_U8 = np.uint8


cdef class _Core:
    """What a stretch of one core needs of the machine, looked up once."""

    cdef object m
    cdef int c
    cdef Py_ssize_t vids
    cdef list vmap
    cdef bint functional
    cdef Py_ssize_t rb
    cdef u8* mem  # the core's private SRAM, (rows, banks, row_bytes) C-contiguous
    cdef Py_ssize_t row_stride  # bytes from one SRAM row to the next (banks x row_bytes)
    cdef u8* img
    cdef Py_ssize_t img_size
    cdef list bursts, bytes_in, transfers_in, macs
    cdef object matrix  # (index in chip.balls, Ball config) or None
    cdef Py_ssize_t acc_col
    cdef dict lat_cache
    cdef object matrix_ports
    cdef bint ok  # the memory is as the fast paths address it (else every instruction is the handler's)

    def __cinit__(self, m, int c):
        cdef cnp.ndarray mem = m.mem[c]
        cdef cnp.ndarray img = m.img
        self.ok = (cnp.PyArray_IS_C_CONTIGUOUS(mem) and cnp.PyArray_IS_C_CONTIGUOUS(img) and mem.ndim == 3
                   and img.ndim == 1 and mem.dtype == _U8 and img.dtype == _U8)
        self.m, self.c = m, c
        self.vids = m.vids_of[c]
        self.vmap = m.vmap[c]
        self.functional = m.functional
        self.rb = m.rb
        self.mem = <u8*>cnp.PyArray_DATA(mem)
        self.row_stride = mem.shape[1] * mem.shape[2]
        self.img = <u8*>cnp.PyArray_DATA(img)
        self.img_size = img.shape[0]
        self.bursts, self.bytes_in, self.transfers_in, self.macs = m.bursts, m.bytes_in, m.transfers_in, m.macs
        self.matrix = m._matrix_of[c]
        self.acc_col = m._acc_col_of[c]
        self.lat_cache = m._lat_cache
        self.matrix_ports = m._matrix_ports

    cdef object mvin(self, Py_ssize_t pc, ins):
        """`Machine._mvin` for a private bank and whole rows from one DRAM run (its ``move
        == 0``) with the geometry already known; None for anything else."""
        cdef Py_ssize_t bid = ins.bank
        if bid >= self.vids:
            return None
        e = self.vmap[bid]
        if e is None:
            return None
        cdef Py_ssize_t stride = ins.stride
        cdef Py_ssize_t W = e.width
        it = ins.iter
        g = e.mvin.get(it if stride == 0 or stride == W else (it, stride))
        if g is None:
            return None
        nrows_, last_, _stride, span_, n_, move, lat, extra, pp, sp, wkeys = g
        if move != 0:
            return None
        cdef Py_ssize_t addr = ins.addr
        cdef Py_ssize_t span = span_, nrows = nrows_, n = n_
        if addr + span > self.img_size:
            return None
        if e.pending:
            self.m._flush(e)
        cdef Py_ssize_t col = e.col, b0 = e.b0, p, r
        wr = e.wr
        for p in range(b0, b0 + col):  # whole rows: `last == col`
            wr[p] += nrows
        if self.functional and n:
            src = self.img + addr
            dst = self.mem + b0 * self.rb
            W = col * self.rb
            for r in range(nrows):
                memcpy(dst + r * self.row_stride, src + r * W, W)
        c = self.c
        self.bursts[c] += extra[0]
        self.bytes_in[c] += n
        self.transfers_in[c] += 1
        return (MVIN, pc, lat, 0, (), wkeys, False, pp, sp, extra, None)

    cdef object matmul(self, Py_ssize_t pc, ins):
        """`Machine._matmul` with A, B and C in private banks, A and B single-column or whole
        bank rows, C whole rows, its latency already known; None otherwise."""
        if self.matrix is None:
            return None
        cdef Py_ssize_t M = ins.M, N = ins.N, K = ins.K, rb = self.rb
        if M < 1 or N < 1 or K < 1 or K % rb or N % (self.acc_col * rb // 4):
            return None
        cdef Py_ssize_t ia = ins.a, ib = ins.b, ic = ins.c
        if ia >= self.vids or ib >= self.vids or ic >= self.vids:
            return None
        ea, eb, ec = self.vmap[ia], self.vmap[ib], self.vmap[ic]
        if ea is None or eb is None or ec is None:
            return None
        cdef Py_ssize_t ca = ea.col, cb = eb.col, cc = ec.col
        if cc % self.acc_col:
            return None
        cdef Py_ssize_t Wa = ea.width, Wb = eb.width, Wc = ec.width
        cdef Py_ssize_t a_start = ins.a_row * Wa, b_start = ins.b_row * Wb, c_start = ins.c_row * Wc
        cdef Py_ssize_t na = M * K, nb = N * K, nc = M * N * 4
        # `Machine._access`'s row counts: a single-column bank's lines, or whole rows of a wider one
        if (ca != 1 and na % Wa) or (cb != 1 and nb % Wb):
            return None
        cdef Py_ssize_t ra0 = a_start // Wa, ra1 = (a_start + na + Wa - 1) // Wa
        cdef Py_ssize_t rb0 = b_start // Wb, rb1 = (b_start + nb + Wb - 1) // Wb
        if ra1 > ea.rows or rb1 > eb.rows:
            return None
        if c_start % Wc or nc % Wc:
            return None
        cdef Py_ssize_t r0 = c_start // Wc, r1 = r0 + nc // Wc
        if r1 > ec.rows:
            return None
        idx, ball = self.matrix
        lat = self.lat_cache.get((id(ball), ins.dataflow, M, N, K))
        if lat is None:
            return None
        acc = ins.accumulate
        m = self.m
        c = self.c
        self.macs[c] += M * N * K
        if ea.pending:
            m._flush(ea)
        if eb.pending:
            m._flush(eb)
        cdef Py_ssize_t dr, p, b0
        dr, b0, rd = ra1 - ra0, ea.b0, ea.rd
        for p in range(b0, b0 + ca):
            rd[p] += dr
        dr, b0, rd = rb1 - rb0, eb.b0, eb.rd
        for p in range(b0, b0 + cb):
            rd[p] += dr
        dr, b0, wr = r1 - r0, ec.b0, ec.wr
        if acc:
            rd = ec.rd
            for p in range(b0, b0 + cc):
                rd[p] += dr
                wr[p] += dr
        else:
            for p in range(b0, b0 + cc):
                wr[p] += dr
        if self.functional:
            self.chain(ec, c_start, M, N, K, acc, ea.b0, ca, a_start, eb.b0, cb, b_start)
        rk = (ea.key,) if ea.key == eb.key else (ea.key, eb.key)
        return (BALL, pc, lat, idx, rk, (ec.key,), acc or c_start != 0, self.matrix_ports, 0, None, None)

    cdef void copy_operand(self, cnp.ndarray buf, Py_ssize_t rows, Py_ssize_t K, Py_ssize_t k0, Py_ssize_t b0,
                           Py_ssize_t col, Py_ssize_t start):
        """Bytes [start, start + rows * K) of a private bank of `col` banks from b0 (its byte
        stream: line i in bank b0 + i % col, SRAM row i // col) into columns k0 .. k0 + K of
        `buf` (rows x capacity uint8), K bytes a row. Lines never straddle a row of `buf`:
        K and `start` are whole lines (checked)."""
        cdef u8* out = <u8*>cnp.PyArray_DATA(buf)
        cdef Py_ssize_t cap = buf.shape[1], rb = self.rb, i, j, line, q
        cdef Py_ssize_t lines = K // rb
        cdef u8* base = self.mem + b0 * rb
        line = start // rb
        if col == 1:
            for i in range(rows):
                for j in range(lines):
                    memcpy(out + i * cap + k0 + j * rb, base + line * self.row_stride, rb)
                    line += 1
            return
        for i in range(rows):
            for j in range(lines):
                q = line % col
                memcpy(out + i * cap + k0 + j * rb, base + (line // col) * self.row_stride + q * rb, rb)
                line += 1

    cdef void chain(self, ec, Py_ssize_t c_start, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, acc,
                    Py_ssize_t a_b0, Py_ssize_t a_col, Py_ssize_t a_start, Py_ssize_t b_b0, Py_ssize_t b_col,
                    Py_ssize_t b_start) except *:
        """The product joins the chain of its C region (`Machine._matmul`'s deferred chains:
        operands copied side by side into the chain's buffers, applied by `Machine._flush`)."""
        cdef Py_ssize_t k0, cap
        cdef cnp.ndarray abuf, bbuf
        chains = ec.pending
        last = chains[len(chains) - 1] if chains else None  # (no negative indices: wraparound is off)
        ch = last
        if ch is not None and ch[0] == c_start and ch[1] == M and ch[2] == N and acc:
            k0 = ch[6]
            abuf, bbuf = ch[4], ch[5]
            if k0 + K > abuf.shape[1]:
                cap = max(2 * abuf.shape[1], k0 + K)
                ch[4] = np.empty((M, cap), dtype=_U8)
                ch[4][:, :k0] = abuf[:, :k0]
                ch[5] = np.empty((N, cap), dtype=_U8)
                ch[5][:, :k0] = bbuf[:, :k0]
                abuf, bbuf = ch[4], ch[5]
        else:
            k0 = 0
            kcap = ec.kcap
            cap = kcap if K < kcap and (M + N) * kcap <= _CHAIN_HINT_BYTES else K
            abuf, bbuf = np.empty((M, cap), dtype=_U8), np.empty((N, cap), dtype=_U8)
            ch = [c_start, M, N, acc, abuf, bbuf, 0]
            if last is not None and last[0] == c_start and last[1] == M and last[2] == N:
                chains[len(chains) - 1] = ch  # overwrites the whole region: the pending chain is dead
            elif chains:
                chains.append(ch)
            else:
                ec.pending = [ch]
        self.copy_operand(abuf, M, K, k0, a_b0, a_col, a_start)
        self.copy_operand(bbuf, N, K, k0, b_b0, b_col, b_start)
        ch[6] = k0 + K


def run_stretch(m, int c, list instrs, Py_ssize_t lo, Py_ssize_t hi, list out):
    """Execute instructions lo .. hi - 1 of core c (no BARRIER among them but the last),
    appending their timing records to `out`, as `Machine.run`'s loop does."""
    handlers = m.handlers
    cdef _Core core = _Core(m, c)
    cdef bint fast = core.ok and not m.trace
    cdef Py_ssize_t pc
    for pc in range(lo, hi):
        ins = instrs[pc]
        t = type(ins)
        rec = None
        if fast:
            if t is Mvin:
                rec = core.mvin(pc, ins)
            elif t is Matmul:
                rec = core.matmul(pc, ins)
        if rec is None:
            rec = handlers[t](c, pc, ins)
        out.append(rec)
