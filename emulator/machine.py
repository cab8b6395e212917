"""The functional model: banks as numpy arrays, every instruction executed in program order.

Private SRAM of a core is one uint8 array of shape ``(rows, banks, row_bytes)``: physical
bank ``p`` is ``mem[:, p, :]``. A virtual bank of ``col`` banks starting at ``b0`` is the
view ``mem[:, b0:b0+col, :]``, whose C-order byte stream is exactly the beat striping of
HARDWARE.md (line ``i`` in bank ``b0 + i % col``, row ``i // col``). Shared memory of a
tile is the same kind of array, ``(shared rows, shared banks, row_bytes)``, each shared
bank one physical bank wide. Only ``min(rows, 2**isa.row_addr_bits)`` rows of a private
bank are addressable.

Cores run in *barrier epochs*: every core executes its instructions up to its next
``BARRIER``, core after core, then every core the next stretch. That is the program-order
result of any race-free program (cores communicate through DRAM and shared memory only
across barriers). Within a core, program order is what in-order commit with bank renaming
guarantees, so the functional result does not depend on the timing model.

Each executed instruction leaves a compact *record* for the timing model (its kind,
latency, banks read and written, channel ports, DMA bursts) so the timing pass never looks
at data. Errors (unallocated bank, row past the bank, DRAM outside the image, bad
operands) are :class:`~emulator.errors.ExecutionError`\\ s naming core, instruction index
and operands.
"""

from __future__ import annotations

import math
import time

import numpy as np

from . import balls as B
from . import coreops
from .core_choice import functional_core
from .errors import EncodeError, ExecutionError, ProgramError
from .dma import burst_groups, transfer_cycles
from .isa import (ACCELERATOR_CLASSES, Barrier, CoreOp, Fence, Im2col, Matmul, Mset, Mvin, Mvout, Mxfp2Int,
                  Transpose, VecMatmul, layout)
from .thread_limits import limited

# Record kinds.
MSET, MVIN, MVOUT, BALL, FENCE, BARRIER, CORE = range(7)
KIND_NAMES = ("MSET", "MVIN", "MVOUT", "BALL", "FENCE", "BARRIER", "CORE")
SHARED_KEY = 1 << 20  # dependence keys >= this are shared-memory banks (per tile)
# A matrix chain's operand buffers start as wide as the bank's last chain (a loop of like
# chains then never regrows them) up to this many bytes; past it they start at one op's K
# and double, so that a bank's pending chains hold about what their ops copied.
_CHAIN_HINT_BYTES = 1 << 25

_U8, _I8, _I32, _F32, _U32 = np.uint8, np.int8, np.int32, np.float32, np.uint32


class _Bank:
    """A resolved bank operand."""

    __slots__ = ("view", "col", "rows", "b0", "key", "shared", "rd", "wr", "width", "label", "pending", "kcap",
                 "mvin")

    def __init__(self, view, col, rows, b0, key, shared, rd, wr, row_bytes, label):
        self.pending: list | None = None  # deferred matrix-Ball chains (see Machine._flush)
        self.kcap = 0  # the terms of this bank's last chain: the next chain's buffer size (see _matmul)
        self.mvin: dict = {}  # MVIN geometry into this bank by (iter, stride): see Machine._mvin_geometry
        self.view, self.col, self.rows, self.b0, self.key = view, col, rows, b0, key
        self.shared, self.rd, self.wr, self.label = shared, rd, wr, label
        self.width = col * row_bytes


class Machine:
    """Executes a program functionally and produces per-core timing records."""

    def __init__(self, chip, program, dram: np.ndarray, *, functional: bool = True, trace: bool = False):
        self.chip = chip
        self.program = program
        self.img = dram
        self.functional = functional
        self.trace = trace
        self.layout = layout(chip)
        bk = chip.banks
        self.rb = bk.row_bytes
        self.n_cores = len(program.cores)
        if self.n_cores > chip.cores.count:
            raise ProgramError(f"program has instruction lists for {self.n_cores} cores, chip {chip.name} has "
                               f"{chip.cores.count}")
        # Each core runs with its own group's hardware (banks, Balls, core-op costs):
        # `ChipConfig.core_chip`; bank row width, DMA, front end and shared memory are the chip's.
        self.core_chips = [chip.core_chip(c) for c in range(self.n_cores)]
        banks = [cc.banks for cc in self.core_chips]
        self.rows_addr_of = [cc.addressable_rows for cc in self.core_chips]
        self.vids_of = [b.virtual_ids for b in banks]
        self.mem = [np.zeros((b.rows, b.count, b.row_bytes), dtype=_U8) for b in banks]
        self.vmap: list[list[_Bank | None]] = [[None] * b.virtual_ids for b in banks]
        self.free = [[True] * b.count for b in banks]
        self.rows_read = [[0] * b.count for b in banks]
        self.rows_written = [[0] * b.count for b in banks]
        self.alloc_rows = [0] * self.n_cores
        self.peak_rows = [0] * self.n_cores
        self.bytes_in = [0] * self.n_cores
        self.bytes_out = [0] * self.n_cores
        self.bursts = [0] * self.n_cores
        self.transfers_in = [0] * self.n_cores
        self.transfers_out = [0] * self.n_cores
        self.core_elements = [0] * self.n_cores
        self.macs = [0] * self.n_cores  # matrix-Ball MACs (M x N x K an op)
        self.vec_macs = [0] * self.n_cores  # vector-matmul Ball MACs (16 x 16 x K an op)
        self.tile_size = chip.cores.tile_size
        sm = chip.shared_memory
        self.sm = sm
        n_tiles = -(-max(self.n_cores, 1) // self.tile_size)
        self.shared_mem: list[np.ndarray | None] = [None] * n_tiles
        self.shared_rows_read = [[0] * sm.banks for _ in range(n_tiles)]
        self.shared_rows_written = [[0] * sm.banks for _ in range(n_tiles)]
        self.shared_banks: list[dict[int, _Bank]] = [{} for _ in range(n_tiles)]
        # Balls of each core: kind -> (index in chip.balls, the core's Ball config), the core's
        # group's kinds only (the index stays the chip's, so the timing's per-Ball counters line up).
        # A group's own config of a kind (its latencies) replaces the chip's on its cores.
        all_balls = {b.kind: (i, b) for i, b in enumerate(chip.balls)}
        self.balls_of = [{k: (i, cc.ball(k)) for k, (i, _) in all_balls.items() if cc.ball(k) is not None}
                         for cc in self.core_chips]
        self._lat_cache: dict = {}
        self._matrix_of = [balls.get("matrix") for balls in self.balls_of]
        self._matrix_ports = (all_balls["matrix"][1].read_ports + all_balls["matrix"][1].write_ports
                              if "matrix" in all_balls else 0)
        self._acc_col_of = [b.acc_col for b in banks]
        self._dma_cache: dict = {}
        self.burst_beats = chip.dma_burst_beats
        self.k_inflight = chip.dma_parallel_bursts
        self.records: list[list[tuple]] = [[] for _ in range(self.n_cores)]
        # Each instruction class's handler, called ``handler(machine, c, pc, ins)``: plain
        # functions, not bound methods, so that a machine is no reference cycle and its
        # records go when the run drops it (a cycle left them to a collection that walked
        # every record: 35-60 ms after each 100,000-instruction run).
        self.handlers = _HANDLERS

    # ------------------------------------------------------------------ driver
    def run(self, boundary=None, cuts=None) -> None:
        """Execute every core's instructions, barrier epoch by barrier epoch: in epoch e each
        core (in core order) runs up to and including its e-th BARRIER. `boundary(e)`, when
        given, is called after every core has run epoch e: every instruction before those
        BARRIERs has run and its DRAM writes are in the image (an op of a multi-worker
        program ends with a BARRIER on every worker), nothing after them has. Its own time
        is kept apart (``boundary_seconds``). `cuts`: of a one-core program (which runs its
        instructions in order, FENCEs and no BARRIER between its ops), more epoch ends, the
        pcs before which its run stops for a boundary (its ops' ends)."""
        self.boundary_seconds = 0.0
        fc = functional_core()  # the compiled check and loop, unless DSE_EMULATOR_CORE=python
        compiled = fc.cores(self) if fc is not None else None  # decoded, checked (errors raised below)
        segments = []
        for c, instrs in enumerate(self.program.cores):
            if compiled is not None:
                segments.append(compiled[c].segments())
                continue
            segs, start = [], 0
            for pc, ins in enumerate(instrs):
                if type(ins) is Barrier:
                    segs.append((start, pc + 1))
                    start = pc + 1
            segs.append((start, len(instrs)))
            segments.append(segs)
        # Barriers meet within a tile: every core of a tile that has a program must reach
        # the same number of them.
        for t0 in range(0, self.n_cores, self.tile_size):
            counts = {c: len(segments[c]) - 1 for c in range(t0, min(t0 + self.tile_size, self.n_cores))}
            if len(set(counts.values())) > 1:
                raise ProgramError(f"cores of tile {t0 // self.tile_size} reach different numbers of barriers: "
                                   + ", ".join(f"core {c}: {n}" for c, n in counts.items()))
        if cuts:
            if self.n_cores != 1:
                raise ProgramError(f"cuts are for a one-core program; this one has {self.n_cores} cores")
            n = len(self.program.cores[0])
            ends = sorted({hi for _, hi in segments[0][:-1]} | {int(pc) for pc in cuts if 0 < pc < n})
            segments[0] = list(zip([0] + ends, ends + [n]))
        epochs = max((len(s) for s in segments), default=0)
        # Every field of every instruction is checked before anything runs.
        check = self.layout.check
        for c, instrs in enumerate(self.program.cores):
            pc = compiled[c].bad if compiled is not None else self.layout.check_all(instrs)
            if pc >= 0:
                try:
                    check(instrs[pc])
                except EncodeError as exc:
                    raise EncodeError(f"core {c}, instruction #{pc}: {exc}", instruction=exc.instruction,
                                      field=exc.field, value=exc.value, width=exc.width) from None
        handlers = self.handlers
        # BLAS on one thread: the products are the plan's tiles (about 128 x 128 x K), where a
        # thread pool gains little, and on a busy machine its threads spin waiting for a core
        # (a 128 x 128 x 4096 chain took 15x longer on 2 threads than on 1 at load 3.5 on
        # 2 cores). A sweep's pool workers run with one thread already. OpenMP too (torch's
        # pool, which the graph's core ops run on): after each op its idle threads spin for
        # the next one while this thread goes on alone, a core burnt (a Llama layer's run at
        # seq 512 took twice the wall and CPU on torch's 2 threads as on one, at load 2.8 on
        # 2 cores: bench/bench_emulator_threads.py). OMP_WAIT_POLICY=passive did as well, but
        # has to be set before torch loads, which the emulator does not decide.
        with limited(1):
            for e in range(epochs):
                for c, instrs in enumerate(self.program.cores):
                    if e >= len(segments[c]):
                        continue
                    lo, hi = segments[c][e]
                    out = self.records[c]
                    if compiled is not None:
                        compiled[c].run(lo, hi, out)
                        continue
                    append = out.append
                    for pc in range(lo, hi):
                        ins = instrs[pc]
                        append(handlers[type(ins)](self, c, pc, ins))
                if boundary is not None:
                    started = time.perf_counter()
                    boundary(e)
                    self.boundary_seconds += time.perf_counter() - started
            self._flush_all()

    # ------------------------------------------------------------------ banks
    def _bank(self, c: int, pc: int, ins, bid: int, role: str) -> _Bank:
        if bid < self.vids_of[c]:
            e = self.vmap[c][bid]
            if e is None:
                raise ExecutionError(c, pc, ins, f"{role} bank {bid} is not allocated (MSET it first)")
            return e
        sm = self.sm
        if sm.enabled and sm.first_bank_id <= bid < sm.first_bank_id + sm.banks:
            return self._shared_bank(c // self.tile_size, bid - sm.first_bank_id)
        shared = (f" or a shared bank ({sm.first_bank_id}..{sm.first_bank_id + sm.banks - 1})"
                  if sm.enabled else " (this chip has no shared memory)")
        raise ExecutionError(c, pc, ins, f"{role} bank id {bid} is neither a virtual bank "
                             f"(0..{self.vids_of[c] - 1}){shared}")

    def _shared_bank(self, tile: int, s: int) -> _Bank:
        e = self.shared_banks[tile].get(s)
        if e is None:
            if self.shared_mem[tile] is None:
                self.shared_mem[tile] = np.zeros((self.sm.rows, self.sm.banks, self.sm.row_bytes), dtype=_U8)
            view = self.shared_mem[tile][:, s:s + 1, :]
            e = _Bank(view, 1, self.sm.rows, s, SHARED_KEY + s, True, self.shared_rows_read[tile],
                      self.shared_rows_written[tile], self.sm.row_bytes, f"shared {s}")
            self.shared_banks[tile][s] = e
        return e

    def _span(self, c, pc, ins, e: _Bank, start: int, n: int, role: str):
        """Row range [r0, r1) and byte offset into it of bytes [start, start+n) of bank e."""
        W = e.width
        r0 = start // W
        r1 = -(-(start + n) // W)
        if r1 > e.rows:
            raise ExecutionError(c, pc, ins, f"{role} needs rows {r0}..{r1 - 1} of bank {e.label}, which has "
                                 f"{e.rows} addressable rows")
        return r0, r1, start - r0 * W

    def _count(self, lst, e: _Bank, start: int, n: int) -> None:
        """Add the rows (lines) touched in each physical bank."""
        if n <= 0:
            return
        rb = self.rb
        l0 = start // rb
        l1 = -(-(start + n) // rb)
        col = e.col
        if col == 1:
            lst[e.b0] += l1 - l0
            return
        b0 = e.b0
        for q in range(col):
            lst[b0 + q] += (l1 - 1 - q) // col - (l0 - 1 - q) // col

    def _mt(self, mtr, rw, e: _Bank, r0, r1):
        mtr.append((rw, e.label if e.shared else e.b0, e.col, r0, r1 - r0))

    def _access(self, c, pc, ins, e: _Bank, start: int, n: int, role: str, lst, mtr, rw: str) -> None:
        """Bounds check, row counters and mtrace of an access to bytes [start, start+n) of e."""
        W = e.width
        r0 = start // W
        r1 = -(-(start + n) // W)
        if r1 > e.rows:
            self._span(c, pc, ins, e, start, n, role)
        col = e.col
        if col == 1:
            lst[e.b0] += r1 - r0
        elif start % W == 0 and n % W == 0:
            b0 = e.b0
            for p in range(b0, b0 + col):
                lst[p] += r1 - r0
        else:
            self._count(lst, e, start, n)
        if mtr is not None:
            self._mt(mtr, rw, e, r0, r1)

    @staticmethod
    def _raw_read(e: _Bank, start: int, n: int) -> np.ndarray:
        """Bytes [start, start+n) of bank e (a view or a copy: use before any write)."""
        W = e.width
        r0 = start // W
        r1 = -(-(start + n) // W)
        flat = e.view[r0:r1].reshape(-1)
        off = start - r0 * W
        if off == 0 and n == flat.size:
            return flat
        return flat[off:off + n]

    @staticmethod
    def _raw_copy(e: _Bank, start: int, n: int) -> np.ndarray:
        """Bytes [start, start+n) of bank e, always a copy."""
        W = e.width
        r0 = start // W
        r1 = -(-(start + n) // W)
        flat = np.array(e.view[r0:r1]).reshape(-1)
        off = start - r0 * W
        if off == 0 and n == flat.size:
            return flat
        return flat[off:off + n]

    @staticmethod
    def _raw_write(e: _Bank, start: int, data: np.ndarray, n: int) -> None:
        if data.dtype != _U8:
            data = data.reshape(-1).view(_U8)
        W = e.width
        r0 = start // W
        r1 = -(-(start + n) // W)
        block = e.view[r0:r1]
        off = start - r0 * W
        if off == 0 and n == (r1 - r0) * W:
            block[...] = data.reshape(block.shape)
        else:  # a partial row: read-modify-write under the byte mask
            flat = block.reshape(-1).copy()
            flat[off:off + n] = data.reshape(-1)
            block[...] = flat.reshape(block.shape)

    def _read(self, c, pc, ins, e: _Bank, start: int, n: int, role: str, mtr=None) -> np.ndarray:
        if e.pending:
            self._flush(e)
        self._access(c, pc, ins, e, start, n, role, e.rd, mtr, "read")
        if not self.functional:
            return None  # type: ignore[return-value]
        return self._raw_read(e, start, n)

    def _write(self, c, pc, ins, e: _Bank, start: int, data: np.ndarray | None, n: int, role: str, mtr=None):
        if e.pending:
            self._flush(e)
        self._access(c, pc, ins, e, start, n, role, e.wr, mtr, "write")
        if self.functional:
            self._raw_write(e, start, data, n)

    def _flush(self, e: _Bank) -> None:
        """Apply the deferred matrix-Ball chains of bank e, in program order.

        A chain is consecutive matmuls into one C region (same base row, M, N): the first
        sets or accumulates, the rest accumulate. Their sum is one exact product of the
        concatenated operands, ``[A1 .. An] @ [B1 .. Bn].T`` (`balls.int_product_of_pieces`:
        exact, wrapped to int32), added to C in int32 - the same bits as applying the ops one
        by one with int32 wraparound. A chain is ``[c_start, M, N, acc, A, B, terms]``: the
        operands side by side in uint8 buffers (M x capacity, N x capacity), `terms` columns
        used (`_matmul` copies each op's operands in: no list of pieces to join here).
        """
        chains, e.pending = e.pending, None
        for c_start, M, N, acc, abuf, bbuf, kw in chains:
            e.kcap = kw
            p = B.int_product_of_pieces([abuf[:, :kw].view(_I8)], [bbuf[:, :kw].view(_I8)])
            if acc:
                p += self._raw_read(e, c_start, M * N * 4).view(_I32).reshape(M, N)  # int32 wraps
            self._raw_write(e, c_start, p, M * N * 4)

    def _flush_all(self) -> None:
        for vm in self.vmap:
            for e in vm:
                if e is not None and e.pending:
                    self._flush(e)
        for banks in self.shared_banks:
            for e in banks.values():
                if e.pending:
                    self._flush(e)

    # ------------------------------------------------------------------ helpers
    def _ball(self, c, pc, ins, kind: str):
        b = self.balls_of[c].get(kind)
        if b is None:
            raise ExecutionError(c, pc, ins, f"chip {self.core_chips[c].name} has no {kind} Ball "
                                 f"(it has {', '.join(self.balls_of[c])})")
        return b

    def _latency(self, ball, mode: str, **vars) -> int:
        key = (id(ball), mode, *vars.values())  # per Ball config: a core group may have its own
        v = self._lat_cache.get(key)
        if v is None:
            if ball.kind == "matrix" and ball.timing == "systolic":
                v = B.systolic_cycles(vars["M"], vars["N"], vars["K"], ball.array_rows, ball.array_cols, mode)
            else:
                v = int(ball.latency_formula(mode).cycles(**vars))
            self._lat_cache[key] = v
        return v

    def _ball_record(self, pc, idx, ball, lat, reads: list[_Bank], write: _Bank, rmw: bool, mtr):
        """Timing record of a Ball op: read ports spread over the read operands in order,
        write ports on the written bank; each operand's ports on its bank's channel pool."""
        if not write.shared and not any(e.shared for e in reads):
            rkeys = tuple(e.key for e in reads) if len(reads) == 1 or reads[0].key != reads[1].key else (reads[0].key,)
            return (BALL, pc, lat, idx, rkeys, (write.key,), rmw, ball.read_ports + ball.write_ports, 0, None, mtr)
        n = len(reads)
        pp = sp = 0
        shared = write.shared
        for i, e in enumerate(reads):
            ports = ball.read_ports // n + (1 if i < ball.read_ports % n else 0)
            if e.shared:
                sp += ports
                shared = True
            else:
                pp += ports
        if write.shared:
            sp += ball.write_ports
        else:
            pp += ball.write_ports
        if shared:
            lat += self.sm.latency_cycles
        rkeys = tuple(dict.fromkeys(e.key for e in reads))
        return (BALL, pc, lat, idx, rkeys, (write.key,), rmw, pp, sp, None, mtr)

    # ------------------------------------------------------------------ instructions
    def _mset(self, c, pc, ins: Mset):
        bk = self.core_chips[c].banks
        if ins.bank >= self.vids_of[c]:
            raise ExecutionError(c, pc, ins, f"MSET bank {ins.bank} is not a virtual bank id "
                                 f"(0..{self.vids_of[c] - 1}); "
                                 f"shared-memory banks need no allocation")
        vmap = self.vmap[c]
        free = self.free[c]
        if ins.alloc:
            if vmap[ins.bank] is not None:
                raise ExecutionError(c, pc, ins, f"bank {ins.bank} is already allocated; free it first")
            col = ins.col
            if not 1 <= col <= bk.max_col:
                raise ExecutionError(c, pc, ins, f"col {col} is outside 1..{bk.max_col}")
            b0, run = -1, 0
            for p in range(bk.count):
                run = run + 1 if free[p] else 0
                if run == col:
                    b0 = p - col + 1
                    break
            if b0 < 0:
                used = sum(1 for f in free if not f)
                raise ExecutionError(c, pc, ins, f"no {col} consecutive free banks ({used} of {bk.count} in use, "
                                     f"first fit, no spilling)")
            for p in range(b0, b0 + col):
                free[p] = False
            rows_addr = self.rows_addr_of[c]
            view = self.mem[c][:rows_addr, b0:b0 + col, :]
            vmap[ins.bank] = _Bank(view, col, rows_addr, b0, ins.bank, False, self.rows_read[c],
                                   self.rows_written[c], self.rb, str(ins.bank))
            self.alloc_rows[c] += col * rows_addr  # the rows an instruction can reach
            if self.alloc_rows[c] > self.peak_rows[c]:
                self.peak_rows[c] = self.alloc_rows[c]
        else:
            e = vmap[ins.bank]
            if e is None:
                raise ExecutionError(c, pc, ins, f"bank {ins.bank} is not allocated")
            if e.pending:
                self._flush(e)
            col, b0 = e.col, e.b0
            for p in range(b0, b0 + col):
                free[p] = True
            vmap[ins.bank] = None
            self.alloc_rows[c] -= col * self.rows_addr_of[c]
        return (MSET, pc, self.chip.front_end.mset_cycles, int(ins.alloc), (), (ins.bank,), False, 0, 0,
                tuple(range(b0, b0 + col)), None)

    def _dma_geometry(self, c, pc, ins, e: _Bank, out: bool):
        """(rows, beats in the last row, effective stride, DRAM end) of a transfer."""
        it = ins.iter
        col, W = e.col, e.width
        nrows = -(-it // col)
        last = it - (nrows - 1) * col if nrows else 0
        stride = ins.stride or W
        if out and ins.stride and ins.stride < W and nrows > 1:
            raise ExecutionError(c, pc, ins, f"stride {ins.stride} is below the {W}-byte bank row: the rows would "
                                 f"overlap in DRAM")
        if nrows > e.rows:
            raise ExecutionError(c, pc, ins, f"{it} beats need {nrows} rows of bank {e.label}, which has {e.rows} "
                                 f"addressable rows")
        end = ins.addr + (nrows - 1) * stride + last * self.rb if nrows else ins.addr
        if end > self.img.size:
            raise ExecutionError(c, pc, ins, f"DRAM bytes [{ins.addr:#x}, {end:#x}) are outside the "
                                 f"{self.img.size}-byte DRAM image")
        return nrows, last, stride

    def _dma_geo(self, ins, e: _Bank, nrows, last, stride) -> tuple:
        """(latency, DMA fields, (private, shared) channel ports) of a transfer's geometry."""
        contiguous = stride == e.width
        key = (nrows, last, e.col, contiguous, e.shared)
        geo = self._dma_cache.get(key)
        if geo is None:
            groups = burst_groups(nrows, last, e.col, contiguous, self.burst_beats)
            nb = sum(g[0] for g in groups)
            beats = ins.iter
            extra = self.sm.latency_cycles if e.shared else 0
            lat = int(transfer_cycles(beats, e.col, not contiguous, self.burst_beats, self.k_inflight,
                                      self.chip.dma.latency_cycles)) + extra
            geo = (lat, (nb, beats, groups, beats * self.rb, extra), (0, 1) if e.shared else (1, 0))
            self._dma_cache[key] = geo
        return geo

    def _dma_record(self, kind, c, pc, ins, e: _Bank, nrows, last, stride, mtr):
        lat, extra, (pp, sp) = self._dma_geo(ins, e, nrows, last, stride)
        self.bursts[c] += extra[0]
        nbytes = extra[3]
        if kind == MVIN:
            self.bytes_in[c] += nbytes
            self.transfers_in[c] += 1
            return (MVIN, pc, lat, 0, (), (e.key,), False, pp, sp, extra, mtr)
        self.bytes_out[c] += nbytes
        self.transfers_out[c] += 1
        return (MVOUT, pc, lat, 0, (e.key,), (), False, pp, sp, extra, mtr)

    def _mvin_geometry(self, c, pc, ins: Mvin, e: _Bank) -> tuple:
        """What an MVIN of ``ins.iter`` beats at ``ins.stride`` into bank e always is (kept in
        ``e.mvin``; a bank's shape never changes): rows, beats in the last row, effective
        stride, DRAM bytes spanned from the address, bytes, how the data moves
        (0 whole rows from one DRAM run, 1 part of a row, 2 strided), the timing record's
        latency, DMA fields and ports, and the written keys. Raises if the rows overflow the bank."""
        it, col, W = ins.iter, e.col, e.width
        nrows = -(-it // col)
        stride = ins.stride or W
        last = it - (nrows - 1) * col if nrows else 0
        if nrows > e.rows:
            self._dma_geometry(c, pc, ins, e, False)  # raises the error
        span = (nrows - 1) * stride + last * self.rb if nrows else -(1 << 62)  # no bytes: never past the image
        move = 2 if stride != W else (0 if it == nrows * col else 1)
        lat, extra, (pp, sp) = self._dma_geo(ins, e, nrows, last, stride)
        g = (nrows, last, stride, span, it * self.rb, move, lat, extra, pp, sp, (e.key,))
        e.mvin[it if stride == W else (it, stride)] = g
        return g

    def _mvin(self, c, pc, ins: Mvin):
        bid = ins.bank
        e = self.vmap[c][bid] if bid < self.vids_of[c] else None
        if e is None:
            e = self._bank(c, pc, ins, bid, "destination")
        stride = ins.stride
        g = e.mvin.get(ins.iter if stride == 0 or stride == e.width else (ins.iter, stride))
        if g is None:
            g = self._mvin_geometry(c, pc, ins, e)
        nrows, last, stride, span, n, move, lat, extra, pp, sp, wkeys = g
        if ins.addr + span > self.img.size:
            self._dma_geometry(c, pc, ins, e, False)  # raises the error
        if e.pending:
            self._flush(e)
        col = e.col
        if self.trace:
            mtr = []
            self._access(c, pc, ins, e, 0, n, "MVIN", e.wr, mtr, "write")
        else:
            mtr = None
            if col == 1:
                e.wr[e.b0] += nrows
            elif last == col:
                wr = e.wr
                for p in range(e.b0, e.b0 + col):
                    wr[p] += nrows
            else:
                self._count(e.wr, e, 0, n)
        if self.functional and n:
            img, addr = self.img, ins.addr
            if move == 0:
                e.view[:nrows] = img[addr:addr + n].reshape(nrows, col, -1)
            elif move == 1:
                self._raw_write(e, 0, img[addr:addr + n], n)
            else:
                W = e.width
                full = nrows - 1 if last < col else nrows
                parts = []
                if full:
                    parts.append(np.lib.stride_tricks.as_strided(img[addr:], (full, W), (stride, 1)).reshape(-1))
                if full < nrows:
                    a = addr + full * stride
                    parts.append(img[a:a + last * self.rb])
                data = parts[0] if len(parts) == 1 else np.concatenate(parts)
                self._raw_write(e, 0, data, n)
        self.bursts[c] += extra[0]
        self.bytes_in[c] += n
        self.transfers_in[c] += 1
        return (MVIN, pc, lat, 0, (), wkeys, False, pp, sp, extra, mtr)

    def _mvout(self, c, pc, ins: Mvout):
        e = self._bank(c, pc, ins, ins.bank, "source")
        nrows, last, stride = self._dma_geometry(c, pc, ins, e, True)
        mtr = [] if self.trace else None
        n = ins.iter * self.rb
        data = self._read(c, pc, ins, e, 0, n, "MVOUT", mtr)
        if self.functional and n:
            img, W = self.img, e.width
            if stride == W:
                img[ins.addr:ins.addr + n] = data
            else:
                full = nrows - 1 if last < e.col else nrows
                if full:
                    dst = np.lib.stride_tricks.as_strided(img[ins.addr:], (full, W), (stride, 1))
                    dst[...] = data[:full * W].reshape(full, W)
                if full < nrows:
                    a = ins.addr + full * stride
                    img[a:a + last * self.rb] = data[full * W:]
        return self._dma_record(MVOUT, c, pc, ins, e, nrows, last, stride, mtr)

    def _fence(self, c, pc, ins):
        return (FENCE, pc, self.chip.front_end.fence_cycles, 0, (), (), False, 0, 0, None, None)

    def _barrier(self, c, pc, ins):
        return (BARRIER, pc, 0, 0, (), (), False, 0, 0, None, None)

    def _matmul(self, c, pc, ins: Matmul):
        mb = self._matrix_of[c]
        if mb is None:
            self._ball(c, pc, ins, "matrix")
        idx, ball = mb
        M, N, K = ins.M, ins.N, ins.K
        self.macs[c] += M * N * K
        rb = self.rb
        acc_col = self._acc_col_of[c]
        if M < 1 or N < 1 or K < 1 or K % rb or N % (acc_col * rb // 4):
            raise ExecutionError(c, pc, ins, f"M, N, K must be positive with K a multiple of {rb} and N a multiple "
                                 f"of {acc_col * rb // 4} (pad to 16)")
        vm, vids = self.vmap[c], self.vids_of[c]
        ea = vm[ins.a] if ins.a < vids else None
        if ea is None:
            ea = self._bank(c, pc, ins, ins.a, "A")
        eb = vm[ins.b] if ins.b < vids else None
        if eb is None:
            eb = self._bank(c, pc, ins, ins.b, "B")
        ec = vm[ins.c] if ins.c < vids else None
        if ec is None:
            ec = self._bank(c, pc, ins, ins.c, "C")
        if ec.col % acc_col:
            raise ExecutionError(c, pc, ins, f"C bank {ins.c} has col {ec.col}; the matrix Ball writes C over a "
                                 f"col-{acc_col} accumulator bank (col a multiple of {acc_col})")
        mtr = [] if self.trace else None
        a_start, b_start, c_start = ins.a_row * ea.width, ins.b_row * eb.width, ins.c_row * ec.width
        if ea.pending:
            self._flush(ea)
        if eb.pending:
            self._flush(eb)
        acc = ins.accumulate
        if mtr is None and ea.col == 1 and eb.col == 1 and ea is not eb:
            r1 = -(-(a_start + M * K) // rb)
            if r1 > ea.rows:
                self._span(c, pc, ins, ea, a_start, M * K, "A")
            ea.rd[ea.b0] += r1 - a_start // rb
            r1 = -(-(b_start + N * K) // rb)
            if r1 > eb.rows:
                self._span(c, pc, ins, eb, b_start, N * K, "B")
            eb.rd[eb.b0] += r1 - b_start // rb
        else:
            self._access(c, pc, ins, ea, a_start, M * K, "A", ea.rd, mtr, "read")
            self._access(c, pc, ins, eb, b_start, N * K, "B", eb.rd, mtr, "read")
        nc = M * N * 4
        W = ec.width
        if mtr is None and c_start % W == 0 and nc % W == 0:  # whole rows of every bank of C
            r0 = c_start // W
            r1 = r0 + nc // W
            if r1 > ec.rows:
                self._span(c, pc, ins, ec, c_start, nc, "C")
            dr = r1 - r0
            wr = ec.wr
            if acc:
                rd = ec.rd
                for p in range(ec.b0, ec.b0 + ec.col):
                    rd[p] += dr
                    wr[p] += dr
            else:
                for p in range(ec.b0, ec.b0 + ec.col):
                    wr[p] += dr
        else:
            if acc:
                self._access(c, pc, ins, ec, c_start, nc, "C", ec.rd, mtr, "read")
            self._access(c, pc, ins, ec, c_start, nc, "C", ec.wr, mtr, "write")
        if self.functional:
            # Deferred: the product joins the chain of its C region (see _flush). The operands
            # are copied into the chain's buffers now (their banks may be rewritten before the
            # chain is applied).
            chains = ec.pending
            ch = chains[-1] if chains else None
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
                cap = ec.kcap if K < ec.kcap and (M + N) * ec.kcap <= _CHAIN_HINT_BYTES else K
                abuf, bbuf = np.empty((M, cap), dtype=_U8), np.empty((N, cap), dtype=_U8)
                ch = [c_start, M, N, acc, abuf, bbuf, 0]
                if chains and chains[-1][0] == c_start and chains[-1][1] == M and chains[-1][2] == N:
                    chains[-1] = ch  # overwrites the whole region: the pending chain is dead
                elif chains:
                    chains.append(ch)
                else:
                    ec.pending = [ch]
            W = ea.width
            if a_start % W == 0 and (M * K) % W == 0:
                abuf[:, k0:k0 + K] = ea.view[a_start // W:(a_start + M * K) // W].reshape(M, K)
            else:
                abuf[:, k0:k0 + K] = self._raw_read(ea, a_start, M * K).reshape(M, K)
            W = eb.width
            if b_start % W == 0 and (N * K) % W == 0:
                bbuf[:, k0:k0 + K] = eb.view[b_start // W:(b_start + N * K) // W].reshape(N, K)
            else:
                bbuf[:, k0:k0 + K] = self._raw_read(eb, b_start, N * K).reshape(N, K)
            ch[6] = k0 + K
        key = (id(ball), ins.dataflow, M, N, K)
        lat = self._lat_cache.get(key)
        if lat is None:  # checked once per distinct key, not per instruction
            if ins.dataflow not in ball.latency and ball.timing != "systolic":
                raise ExecutionError(c, pc, ins, f"matrix Ball of chip {self.chip.name} has no {ins.dataflow!r} "
                                     f"latency formula; allowed: {', '.join(ball.latency)}; or timing = systolic")
            lat = self._lat_cache[key] = self._latency(ball, ins.dataflow, M=M, N=N, K=K, rows=ball.array_rows,
                                                       cols=ball.array_cols)
        if not (ea.shared or eb.shared or ec.shared):
            rk = (ea.key,) if ea.key == eb.key else (ea.key, eb.key)
            return (BALL, pc, lat, idx, rk, (ec.key,), acc or c_start != 0, self._matrix_ports, 0, None, mtr)
        return self._ball_record(pc, idx, ball, lat, [ea, eb], ec, acc or c_start != 0, mtr)

    def _vecmatmul(self, c, pc, ins: VecMatmul):
        idx, ball = self._ball(c, pc, ins, "vecmatmul")
        if ins.iter < 1:
            raise ExecutionError(c, pc, ins, "K (iter) must be at least 1")
        rb = self.rb
        ea = self._bank(c, pc, ins, ins.a, "X")
        eb = self._bank(c, pc, ins, ins.b, "Y")
        ec = self._bank(c, pc, ins, ins.c, "C")
        if ec.col % self._acc_col_of[c]:
            raise ExecutionError(c, pc, ins, f"C bank {ins.c} has col {ec.col}, not a multiple of the accumulator's "
                                 f"{self._acc_col_of[c]}")
        mtr = [] if self.trace else None
        K = ins.iter
        self.vec_macs[c] += rb * rb * K
        x = self._read(c, pc, ins, ea, 0, K * rb, "X", mtr)
        y = self._read(c, pc, ins, eb, 0, K * rb, "Y", mtr)
        cbytes = rb * rb * 4
        old = self._read(c, pc, ins, ec, 0, cbytes, "C", mtr) if ins.accumulate else None
        res = None
        if self.functional:
            res = B.vecmatmul(x.view(_I8).reshape(K, rb), y.view(_I8).reshape(K, rb),
                              old.view(_I32).reshape(rb, rb) if old is not None else None)
        self._write(c, pc, ins, ec, 0, res, cbytes, "C", mtr)
        lat = self._latency(ball, "default", K=K, rows=ball.array_rows, cols=ball.array_cols)
        return self._ball_record(pc, idx, ball, lat, [ea, eb], ec, ins.accumulate, mtr)

    def _im2col(self, c, pc, ins: Im2col):
        idx, ball = self._ball(c, pc, ins, "im2col")
        H, k, s, p = ins.size, ins.kernel, ins.stride, ins.pad
        lim_in, lim_k, lim_p = ball.limit("input"), ball.limit("kernel"), ball.limit("pad")
        if not (1 <= H <= lim_in and 1 <= k <= lim_k and 0 <= p <= lim_p and s >= 1):
            raise ExecutionError(c, pc, ins, f"needs 1 <= size <= {lim_in}, 1 <= kernel <= {lim_k}, "
                                 f"0 <= pad <= {lim_p}, stride >= 1")
        if H + 2 * p < k:
            raise ExecutionError(c, pc, ins, f"kernel {k} is larger than the padded input {H + 2 * p}")
        out = (H + 2 * p - k) // s + 1
        width = -(-(k * k) // self.rb) * self.rb
        es = self._bank(c, pc, ins, ins.src, "source")
        ed = self._bank(c, pc, ins, ins.dst, "destination")
        mtr = [] if self.trace else None
        x = self._read(c, pc, ins, es, 0, H * H, "image", mtr)
        res = B.im2col(x.view(_I8).reshape(H, H), k, s, p, width) if self.functional else None
        self._write(c, pc, ins, ed, 0, res, out * out * width, "im2col output", mtr)
        lat = self._latency(ball, "default", out=out, k=k)
        return self._ball_record(pc, idx, ball, lat, [es], ed, False, mtr)

    def _elem_bits(self, c, pc, ins, bits, what="bits"):
        if bits not in (8, 32):
            raise ExecutionError(c, pc, ins, f"{what} must be 8 or 32, got {bits}")

    def _transpose(self, c, pc, ins: Transpose):
        idx, ball = self._ball(c, pc, ins, "transpose")
        self._elem_bits(c, pc, ins, ins.bits)
        E = self.rb * 8 // ins.bits
        if ins.iter % E:
            raise ExecutionError(c, pc, ins, f"{ins.iter} lines is not a whole number of {E}x{E} blocks "
                                 f"({ins.bits}-bit elements, {E} lines a block)")
        es = self._bank(c, pc, ins, ins.src, "source")
        ed = self._bank(c, pc, ins, ins.dst, "destination")
        mtr = [] if self.trace else None
        n = ins.iter * self.rb
        x = self._read(c, pc, ins, es, 0, n, "source", mtr)
        res = None
        if self.functional:
            dt = _U8 if ins.bits == 8 else _U32
            res = B.transpose_blocks(x.view(dt).reshape(-1, E))
        self._write(c, pc, ins, ed, 0, res, n, "destination", mtr)
        lat = self._latency(ball, "default", iter=ins.iter, bits=ins.bits)
        return self._ball_record(pc, idx, ball, lat, [es], ed, False, mtr)

    def _lane(self, c, pc, ins):
        """A lane Ball's instruction (`balls.LANES`, by the instruction's `ball`): ``iter``
        lines of the source bank through its arithmetic into the destination bank."""
        lane = B.LANES[ins.ball]
        idx, ball = self._ball(c, pc, ins, ins.ball)
        for width in lane.widths:
            self._elem_bits(c, pc, ins, getattr(ins, width), width)
        es = self._bank(c, pc, ins, ins.src, "source")
        ed = self._bank(c, pc, ins, ins.dst, "destination")
        mtr = [] if self.trace else None
        n = ins.iter * self.rb
        x = self._read(c, pc, ins, es, 0, n, "source", mtr)
        res = lane.compute(ins, x) if self.functional else None
        self._write(c, pc, ins, ed, 0, res, lane.written(ins, n), "destination", mtr)
        lat = self._latency(ball, "default", iter=ins.iter)
        return self._ball_record(pc, idx, ball, lat, [es], ed, False, mtr)

    def _mxfp2int(self, c, pc, ins: Mxfp2Int):
        idx, ball = self._ball(c, pc, ins, "mxfp2int")
        es = self._bank(c, pc, ins, ins.src, "payload")
        ek = self._bank(c, pc, ins, ins.scales, "scales")
        ed = self._bank(c, pc, ins, ins.dst, "destination")
        mtr = [] if self.trace else None
        nblk = ins.iter
        rb = self.rb
        pay = self._read(c, pc, ins, es, 0, nblk * rb, "payload", mtr)
        sc = self._read(c, pc, ins, ek, 0, nblk, "scales", mtr)
        res = B.mxfp2int(pay.reshape(nblk, rb), sc) if self.functional else None
        self._write(c, pc, ins, ed, 0, res, nblk * 2 * rb, "destination", mtr)
        lat = self._latency(ball, "default", iter=nblk)
        return self._ball_record(pc, idx, ball, lat, [es, ek], ed, False, mtr)

    def _coreop(self, c, pc, ins: CoreOp):
        if ins.kind not in coreops.KINDS:
            raise ExecutionError(c, pc, ins, f"unknown core op kind {ins.kind!r}; known: {sorted(coreops.KINDS)}")
        if self.functional:
            try:
                coreops.execute(self.img, ins.kind, ins.dst, ins.srcs, ins.params)
            except (ValueError, KeyError, TypeError) as exc:
                raise ExecutionError(c, pc, ins, str(exc)) from None
        n = ins.element_count()
        cpe = self.core_chips[c].core_cycles_per_element(ins.kind)
        self.core_elements[c] += n
        return (CORE, pc, math.ceil(n * cpe), 0, (), (), False, 0, 0, n, None)


_HANDLERS = {
    Mset: Machine._mset, Mvin: Machine._mvin, Mvout: Machine._mvout, Fence: Machine._fence,
    Barrier: Machine._barrier, Matmul: Machine._matmul, VecMatmul: Machine._vecmatmul, Im2col: Machine._im2col,
    Transpose: Machine._transpose, Mxfp2Int: Machine._mxfp2int, CoreOp: Machine._coreop,
    **{cls: Machine._lane for cls in ACCELERATOR_CLASSES if cls.ball in B.LANES},
}
