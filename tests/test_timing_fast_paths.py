"""The emulator's fast paths against their references, on generated programs.

* Timing: `run_overlapped` with `emulator.timing._core_proc` (small transfers' bursts
  reserved inline, the channel pool pruned to what a later start can meet, a core running
  ahead while it stays the earliest) against `emulator.timing_reference.core_proc_reference`
  (the loop before them): every cycle, stall and counter, and the traces, identical core
  by core, on several chips with 1 and several cores, shared-memory banks and barriers.
* Functional: matrix-Ball chains kept in growing operand buffers (`Machine._matmul`,
  `Machine._flush`) against int64 numpy, op by op, with chains that grow past their
  buffer, change K, interleave C regions in one bank, restart, and read misaligned operands.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import numpy as np
import pytest

from emulator import Barrier, Fence, Matmul, Mset, Mvin, Mvout, Program, Region, Transpose, run
from emulator.chip import chip_from_dict
from emulator.machine import Machine
from emulator.timing import _Trace, run_overlapped
from emulator.timing_reference import core_proc_reference

CONFIGS = Path(__file__).resolve().parents[1] / "chip_configs"


def chip(name: str, **sections):
    with open(CONFIGS / f"{name}.toml", "rb") as f:
        d = copy.deepcopy(tomllib.load(f))
    for section, fields in sections.items():
        d.setdefault(section, {}).update(fields)
    return chip_from_dict(d)


def random_program(rng, c, cores: int, barriers: int) -> Program:
    """Loads (private and shared banks, 1 to 64 beats, contiguous or strided), matrix ops
    (accumulating or not, both dataflows, base rows, A from shared memory), transposes,
    stores, fences, a bank freed and taken again, and `barriers` barriers on every core."""
    sm = c.shared_memory
    shared = [sm.first_bank_id + s for s in range(min(sm.banks, 4))] if sm.enabled else []
    has_transpose = all(cc.ball("transpose") is not None for cc in (c.core_chip(i) for i in range(cores)))
    seeds = rng.integers(0, 2 ** 31, cores)

    def build(core):
        r = np.random.default_rng(int(seeds[core]))
        prog = [Mset(0, 1), Mset(1, 1), Mset(2, 4), Mset(3, 1)]
        n = int(r.integers(30, 90))
        at = sorted(r.choice(np.arange(1, n), barriers, replace=False)) if barriers else []
        for i in range(n):
            if i in at:
                prog.append(Barrier())
                continue
            x = r.random()
            if x < 0.3:
                bank = int(r.choice([0, 1] + shared[:2])) if shared else int(r.integers(0, 2))
                prog.append(Mvin(bank, int(r.integers(0, 4096)) * 16, int(r.integers(1, 64)),
                                 int(r.choice([0, 16, 64, 4096]))))
            elif x < 0.55:
                a = int(r.choice([0] + shared[:1])) if shared else 0
                prog.append(Matmul(a, 1, 2, 16, 16, int(r.choice([16, 32])), dataflow=str(r.choice(["ws", "os"])),
                                   accumulate=bool(r.random() < 0.6), c_row=int(r.choice([0, 0, 4]))))
            elif x < 0.62 and has_transpose:
                prog.append(Transpose(0, 3, 16))
            elif x < 0.8:
                src = int(r.choice([2, 2] + shared[1:2])) if shared else 2
                prog.append(Mvout(src, (1 << 19) + core * 65536 + int(r.integers(0, 64)) * 64,
                                  int(r.integers(1, 65)), int(r.choice([0, 64, 1024]))))
            elif x < 0.85:
                prog += [Mset(3, alloc=False), Mset(3, 1)]
            else:
                prog.append(Fence())
        return prog + [Mset(b, alloc=False) for b in (0, 1, 2, 3)]

    return Program.spmd(build, cores, dram_bytes=1 << 20)


def summary(times, busy):
    return [(c.cycles, c.instructions, c.core_ops, c.stalls, c.busy(), c.dma_busy(), c.ball_ops, c.ball_busy,
             c.core_op_cycles, c.channel_conflicts, c.channel_wait, c.shared_channel_conflicts, c.bus_wait,
             c.dma_latency_sum) for c in times] + [busy]


CASES = [
    ("goban", 4, {}),  # shared memory, one burst in flight: runs of bursts and small transfers inline
    ("goban", 1, {}),  # solo: no yields, the DMA's fast path
    ("goban", 4, {"dma": {"bursts_in_flight": 2, "inflight_requests": 2}}),  # bursts in flight side by side
    ("goban", 4, {"dma": {"latency_cycles": 3}}),  # bursts back to back: the bus's merges
    ("goban", 4, {"dma": {"system_bus_bytes": 4}}),  # a beat holds the bus 4 cycles: gaps searched
    ("goban", 4, {"banks": {"channels": 6}}),  # a matrix op and a transfer cannot share the channels
    ("goban", 4, {"banks": {"channels": 6}, "dma": {"latency_cycles": 2}, "front_end": {"rob_entries": 4}}),
    ("poly", 5, {}),  # core groups with their own banks and Balls
    ("toy", 1, {}),
    ("pebble", 1, {}),
]


@pytest.mark.parametrize("name, cores, sections", CASES)
@pytest.mark.parametrize("seed", range(3))
def test_overlapped_timing_equals_the_reference_loop(name, cores, sections, seed):
    rng = np.random.default_rng(seed)
    c = chip(name, **copy.deepcopy(sections))
    prog = random_program(rng, c, cores, barriers=2 if cores > 1 else 0)
    m = Machine(c, prog, prog.image(), functional=False)
    m.run()
    fast = summary(*run_overlapped(m.records, c))
    ref = summary(*run_overlapped(m.records, c, proc=core_proc_reference))
    assert fast == ref
    assert fast[0][0] > 0 and fast[-1] > 0


@pytest.mark.parametrize("name, cores", [("goban", 4), ("toy", 1)])
def test_overlapped_traces_equal_the_reference_loop(name, cores):
    c = chip(name)
    prog = random_program(np.random.default_rng(7), c, cores, barriers=1 if cores > 1 else 0)
    m = Machine(c, prog, prog.image(), functional=False, trace=True)
    m.run()

    def op_names(core, pc):
        return prog.cores[core][pc].op

    got, want = _Trace(), _Trace()
    run_overlapped(m.records, c, got, op_names)
    run_overlapped(m.records, c, want, op_names, proc=core_proc_reference)
    assert got.itrace == want.itrace and got.mtrace == want.mtrace and got.pmctrace == want.pmctrace
    assert len(got.itrace) == 2 * sum(len(p) for p in prog.cores)


def test_the_4_core_tiled_matmul_times_as_the_reference_loop():
    """The bench's case (`bench/bench_emulator.py`), smaller: 4-burst loads between other
    cores' bursts, 16-burst strided stores, the matrix op and loads contending for channels."""
    from emulator.programs import tiled_matmul
    c = chip("goban")
    prog = tiled_matmul(128, 128, 128, 16, 16, 16, cores=4)
    m = Machine(c, prog, prog.image(), functional=False)
    m.run()
    fast = summary(*run_overlapped(m.records, c))
    assert fast == summary(*run_overlapped(m.records, c, proc=core_proc_reference))
    assert fast[0][3]["rob_full"] > 0 and fast[0][3]["dma"] > 0  # the loads bind, as in the bench


def wrap32(x: np.ndarray) -> np.ndarray:
    return ((x + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


@pytest.mark.parametrize("seed", range(4))
def test_matrix_chains_equal_op_by_op_products(seed):
    """Chains longer than their first buffer (K 16, 40 ops: 640 terms, past the 1024-term
    float32 slices with the next chain), K changing within a chain, two C regions of one
    bank interleaved (two pending chains), a chain restarted by a non-accumulating op, and
    M = 1 and 3 operands that end inside a bank row of a col-2 bank."""
    rng = np.random.default_rng(seed)
    c = chip("toy")
    N = 16
    a_pool = rng.integers(-128, 128, (64, 16, 64), dtype=np.int8)  # 64 A tiles of 16 x 64
    b_pool = rng.integers(-128, 128, (64, N, 64), dtype=np.int8)
    A0, B0 = 0, a_pool.nbytes
    C_OUT = B0 + b_pool.nbytes
    prog = [Mset(0, 2), Mset(1, 2), Mset(2, 8)]  # A, B in col-2 banks (32-byte rows), C col 8 (128-byte rows)
    ref = {0: np.zeros((16, N), np.int64), 8: np.zeros((16, N), np.int64)}  # C by base row
    outs = []
    for step in range(int(rng.integers(90, 130))):
        i = int(rng.integers(0, 64))
        M = int(rng.choice([16, 16, 16, 3, 1]))
        K = int(rng.choice([16, 16, 32, 48, 64]))
        c_row = int(rng.choice([0, 8])) if M == 16 else 0
        acc = bool(rng.random() < 0.9) and step > 0
        # The op's A (M x K) and B (N x K) are the first M * K (N * K) bytes of tile i, row-major.
        prog.append(Mvin(0, A0 + i * 1024, M * K // 16))
        prog.append(Mvin(1, B0 + i * 1024, N * K // 16))
        a = a_pool[i].reshape(-1)[:M * K].reshape(M, K).astype(np.int64)
        b = b_pool[i].reshape(-1)[:N * K].reshape(N, K).astype(np.int64)
        prog.append(Matmul(0, 1, 2, M, N, K, accumulate=acc, c_row=c_row))
        p = a @ b.T
        cur = ref[c_row]
        if acc:
            cur[:M] += p
        else:
            cur[:M] = p
        if rng.random() < 0.08:
            addr = C_OUT + len(outs) * 2 * 16 * N * 4
            prog.append(Mvout(2, addr, 2 * 16 * N * 4 // 16))  # C rows 0..15 (16 rows a region, 8 a bank row)
            outs.append((addr, {r: v.copy() for r, v in ref.items()}))
    addr = C_OUT + len(outs) * 2 * 16 * N * 4
    prog.append(Mvout(2, addr, 2 * 16 * N * 4 // 16))
    outs.append((addr, {r: v.copy() for r, v in ref.items()}))
    dram = C_OUT + len(outs) * 2 * 16 * N * 4
    program = Program([prog], inputs={"a": Region(A0, a_pool.shape), "b": Region(B0, b_pool.shape)},
                      outputs={f"c{j}": Region(a_, (32, N), "int32") for j, (a_, _) in enumerate(outs)},
                      dram_bytes=dram)
    r = run(program, c, {"a": a_pool, "b": b_pool})
    for j, (_, want) in enumerate(outs):
        got = r.outputs[f"c{j}"]
        # C's bank rows are 128 bytes = 32 int32: region at base row 0 holds matrix rows 0..15 at
        # bank rows 0..7, the one at base row 8 rows 0..15 at bank rows 8..15.
        assert np.array_equal(got[:16], wrap32(want[0])), j
        assert np.array_equal(got[16:], wrap32(want[8])), j
