"""Emulator timing: exact cycles of small programs in both modes, computed by hand.

Conventions of the `overlapped` mode (emulator.timing): dispatch D (one a cycle), issue
I >= D + issue_delay (1), start S, complete C, in-order commit. toy defaults: DMA latency
100 a burst, 16-byte beats, 1024-byte bursts, one burst in flight, 7 channels, matrix
Ball 2 + 4 ports and M*N*K/16 + M*N (ws), ReLU 1 + 1 ports and `iter`, MSET 1 cycle,
BARRIER 1 cycle after the last arrival.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import numpy as np
import pytest

from emulator import Barrier, Matmul, Mset, Mvin, Mvout, Program, Relu, Transpose, run
from emulator.chip import chip_from_dict
from emulator.programs import matmul_inputs, tiled_matmul

CONFIGS = Path(__file__).resolve().parents[1] / "chip_configs"


def data(name: str) -> dict:
    with open(CONFIGS / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


def chip(name: str = "toy", **sections):
    d = copy.deepcopy(data(name))
    for section, fields in sections.items():
        d.setdefault(section, {}).update(fields)
    return chip_from_dict(d)


def cycles(prog, c, mode):
    return run(prog, c, None, mode=mode)


def issue_complete(result, pc, core=0):
    ev = {(e["event"]): e["cycle"] for e in result.trace.itrace if e["pc"] == pc and e["core"] == core}
    return ev["issue"], ev["complete"]


TWO_MVINS_THEN_MATMUL = [Mset(0, 1), Mset(1, 1), Mset(2, 4), Mvin(0, 0, 16), Mvin(1, 256, 16),
                         Matmul(0, 1, 2, 16, 16, 16)]


def test_two_independent_mvins_then_a_matrix_op():
    toy = chip()
    prog = Program([TWO_MVINS_THEN_MATMUL], dram_bytes=512)
    # serial: 3 MSETs + 2 x (100 + 16) + (16*16*16/16 + 16*16)
    assert cycles(prog, toy, "serial").cycles == 3 + 2 * 116 + 512 == 747
    # overlapped: MSETs complete at 2, 3, 4; MVIN0 issues at 4 -> 120; MVIN1 issues at 5 but
    # waits for the one burst slot -> 120..236; the matmul issues at 6, waits for B -> 236..748.
    r = run(prog, toy, None, trace=True)
    assert r.cycles == 748
    assert issue_complete(r, 3) == (4, 120) and issue_complete(r, 4) == (5, 236) and issue_complete(r, 5) == (6, 748)
    c = r.counters
    assert c.value("stall_dma_cycles", core=0) == 120 - 5
    assert c.value("stall_dependence_cycles", core=0) == 236 - 6
    # os dataflow: M*N*K/16 + M*N/2 = 384
    prog_os = Program([TWO_MVINS_THEN_MATMUL[:-1] + [Matmul(0, 1, 2, 16, 16, 16, "os")]], dram_bytes=512)
    assert cycles(prog_os, toy, "serial").cycles == 619 and cycles(prog_os, toy, "overlapped").cycles == 620


def test_two_bursts_in_flight_overlap_latency_but_share_the_bus():
    two = chip(dma={"bursts_in_flight": 2, "burst_max_bytes": 1024})
    prog = Program([TWO_MVINS_THEN_MATMUL], dram_bytes=512)
    assert cycles(prog, two, "serial").cycles == 747  # ceil(1 / 2) * 100 + 16 a transfer
    # MVIN0: request 4, data 104..120. MVIN1: request 5, data due at 105 but the bus is
    # busy until 120 -> 120..136. Matmul 136..648.
    r = run(prog, two, None, trace=True)
    assert r.cycles == 648 and issue_complete(r, 4)[1] == 136
    assert r.counters.value("dma_bus_wait_cycles", core=0) == 136 - 5 - 116
    assert r.counters.value("bus_busy_cycles", channel="system_bus") == 32


def test_a_dependence_chain():
    toy = chip()
    prog = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 1), Mvin(0, 0, 16), Relu(0, 1, 16), Relu(1, 2, 16),
                     Mvout(2, 256, 16)]], dram_bytes=512)
    assert cycles(prog, toy, "serial").cycles == 3 + 116 + 16 + 16 + 116 == 267
    # MVIN 4..120, ReLU 120..136, ReLU 136..152, MVOUT 152..268
    r = run(prog, toy, None, trace=True)
    assert r.cycles == 268
    assert [issue_complete(r, pc)[1] for pc in (3, 4, 5, 6)] == [120, 136, 152, 268]
    assert r.counters.value("stall_dependence_cycles", core=0) == (120 - 5) + (136 - 6) + (152 - 7)


def test_a_full_reorder_buffer():
    prog = Program([[Mset(0, 1), Mset(1, 1), Mvin(0, 0, 16), Relu(1, 1, 256)]], dram_bytes=256)
    # 16 entries: the ReLU (independent of the MVIN) runs 4..260 beside the MVIN (3..119)
    assert cycles(prog, chip(), "overlapped").cycles == 260
    assert cycles(prog, chip(), "serial").cycles == 1 + 1 + 116 + 256 == 374
    # 1 entry: each instruction dispatches only when the previous one commits:
    # MSET 0..2, MSET 2..4, MVIN dispatched 4 -> 5..121, ReLU dispatched 121 -> 122..378
    r = run(prog, chip(front_end={"rob_entries": 1}), None, trace=True)
    assert r.cycles == 378 and issue_complete(r, 3) == (122, 378)
    assert r.counters.value("stall_rob_full_cycles", core=0) == 1 + 1 + 116


def test_a_barrier_between_two_cores():
    two = chip(cores={"count": 2, "tile_size": 2})
    prog = Program([[Mset(0, 1), Mvin(0, 0, 16), Barrier()], [Barrier(), Mset(0, 1)]], dram_bytes=256)
    # serial: core 0 reaches the barrier at 1 + 116 = 117, releases at 118; core 1's MSET ends 119
    s = cycles(prog, two, "serial")
    assert s.cycles == 119 and s.counters.value("cycles", core=0) == 118
    assert s.counters.value("stall_barrier_cycles", core=1) == 118
    # overlapped: core 0's MVIN 2..118; the barrier drains it, arrival 118, release 119;
    # core 1 then dispatches its MSET at 119: issue 120, done 121.
    r = run(prog, two, None, trace=True)
    assert r.cycles == 121 and r.counters.value("cycles", core=0) == 119
    assert issue_complete(r, 1, core=1) == (120, 121)
    assert r.counters.value("stall_barrier_cycles", core=1) == 119
    assert r.counters.value("stall_barrier_cycles", core=0) == 119 - 2


def test_cores_share_the_dram_bus():
    two = chip(cores={"count": 2, "tile_size": 2})
    prog = Program([[Mset(0, 4), Mvin(0, 0, 64)], [Mset(0, 4), Mvin(0, 1024, 64)]], dram_bytes=2048)
    assert cycles(prog, two, "serial").cycles == 1 + 164
    # both request at 2; core 0's data holds the bus 102..166, core 1's waits -> 166..230
    r = run(prog, two, None)
    assert r.cycles == 230 and r.counters.value("cycles", core=0) == 166
    assert r.counters.value("dma_bus_wait_cycles", core=1) == 64
    assert r.counters.value("bus_busy_cycles", channel="system_bus") == 128


def test_bank_channels_are_held_while_an_op_runs():
    prog = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4), Mset(3, 1), Mset(4, 1),
                     Matmul(0, 1, 2, 16, 16, 16), Relu(3, 4, 16)]], dram_bytes=64)
    # the matmul holds 6 of 7 channels over 6..518; the ReLU (2 ports) waits for them
    r = run(prog, chip(), None)
    assert r.cycles == 534
    assert r.counters.value("channel_conflicts", core=0) == 1
    assert r.counters.value("channel_wait_cycles", core=0) == 518 - 7
    assert cycles(prog, chip(), "serial").cycles == 5 + 512 + 16
    assert cycles(prog, chip(banks={"channels": 8}), "overlapped").cycles == 518


def test_the_ball_queue_is_in_order_and_blocks_behind_a_busy_ball():
    prog = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 1)] + [Relu(0, 1, 100)] * 6 + [Transpose(0, 2, 16, 8)]],
                   dram_bytes=64)
    r = run(prog, chip(), None, trace=True)
    # ReLUs issue at 4, 5, 6, 7, 8 and run back to back from 4; the sixth waits for a queue
    # slot until the second leaves the queue (104); the transpose's Ball is idle, but it is
    # queued behind the sixth ReLU and starts with it.
    assert [issue_complete(r, pc) for pc in range(3, 9)] == [
        (4, 104), (5, 204), (6, 304), (7, 404), (8, 504), (104, 604)]
    assert issue_complete(r, 9) == (204, 504 + 16 * 16 * 2)
    assert r.cycles == 1016
    assert cycles(prog, chip(), "serial").cycles == 3 + 600 + 512


def test_latency_formulas_come_from_the_config():
    from emulator.errors import ExecutionError

    d = copy.deepcopy(data("toy"))
    for b in d["balls"]:
        if b["kind"] == "relu":
            b["latency"] = {"default": "3 * iter + 7"}
        if b["kind"] == "matrix":
            b["timing"] = "systolic"
    c = chip_from_dict(d)
    prog = Program([[Mset(0, 1), Relu(0, 0, 10)]], dram_bytes=64)
    assert cycles(prog, c, "serial").cycles == 1 + 37
    mm = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4), Matmul(0, 1, 2, 32, 32, 64),
                   Matmul(0, 1, 2, 32, 32, 64, "os")]], dram_bytes=64)
    # SCALE-Sim's compute cycles (tests/test_systolic.py): ws ceil(64/16) * ceil(32/16) folds x
    # (2*16 + 16 + 32 - 2) lines - 1; os ceil(32/16) * ceil(32/16) folds x (16 + 16 + 64 - 2) - 1
    assert cycles(mm, c, "serial").cycles == 3 + (8 * 78 - 1) + (4 * 94 - 1)
    # is (K on rows, M on cols, N streamed): ceil(64/16) * ceil(32/16) x (2*16 + 16 + 32 - 2) - 1
    mm_is = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4), Matmul(0, 1, 2, 32, 32, 64, "is")]], dram_bytes=64)
    assert cycles(mm_is, c, "serial").cycles == 3 + (8 * 78 - 1)
    with pytest.raises(ExecutionError, match="matrix Ball of chip toy has no 'is' latency formula; "
                                             "allowed: ws, os; or timing = systolic"):
        cycles(mm_is, chip(), "serial")


def test_dma_constants_come_from_the_config():
    c = chip(dma={"latency_cycles": 40, "burst_max_bytes": 64})
    prog = Program([[Mset(0, 1), Mvin(0, 0, 16)]], dram_bytes=256)
    assert cycles(prog, c, "serial").cycles == 1 + 4 * 40 + 16
    assert cycles(prog, c, "overlapped").cycles == 2 + 4 * 40 + 16


def test_timing_is_deterministic_and_overlap_helps_a_tiled_matmul():
    M = N = K = 64
    for name, cores in (("toy", 1), ("goban", 4)):
        c = chip(name)
        prog = tiled_matmul(M, N, K, 16, 16, 16, cores=cores, fence_after_mvout=False)
        _, _, vals = matmul_inputs(M, N, K, 16, 16, 16)
        a = run(prog, c, vals)
        b = run(prog, c, vals)
        assert [x.value for x in a.counters if x.scope != "host"] == [x.value for x in b.counters if x.scope != "host"]
        s = run(prog, c, vals, mode="serial")
        assert a.cycles < s.cycles, name
        for core in range(cores):
            cs = a.counters
            assert cs.value("busy_cycles", core=core) + cs.value("idle_cycles", core=core) == cs.value("cycles", core=core)
    assert np.isfinite(a.cycles)


@pytest.mark.parametrize("mode", ["serial", "overlapped"])
def test_shared_memory_adds_its_latency(mode):
    g = chip("goban")
    shared = g.shared_memory.first_bank_id
    prog = Program([[Mvin(shared, 0, 4)]], dram_bytes=64)
    base = 100 + 4 + g.shared_memory.latency_cycles  # 64-byte bursts: 1 burst
    assert cycles(prog, g, mode).cycles == base + (1 if mode == "overlapped" else 0)


def _merged(starts, ends):
    out = []
    for s, e in zip(starts, ends):
        if out and out[-1][1] == s:
            out[-1][1] = e
        else:
            out.append([s, e])
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_run_of_bursts_reserves_the_bus_as_one_burst_at_a_time_does(seed):
    """`_bursts_one_in_flight` (runs of bursts checked at once) against the plain loop:
    each burst requested when the previous one ends, data due L later, first free gap."""
    from emulator.timing import Bus, _bursts_one_in_flight

    rng = np.random.default_rng(seed)
    L, bpb = 100, [1.0, 0.25, 0.5, 2.0, 0.25, 1.0][seed]
    for trial in range(30):
        reserved = Bus()
        t = int(rng.integers(0, 500))
        for _ in range(int(rng.integers(0, 60))):  # other cores' bursts: sorted, disjoint, some touching
            t += int(rng.integers(0, 300))
            n = int(rng.integers(1, 80))
            reserved.alloc(t, n)
            t += n
        groups = [(int(rng.integers(0, 40)), int(rng.integers(1, 80))) for _ in range(int(rng.integers(1, 4)))]
        req = int(rng.integers(0, 2000))
        fast, plain = Bus(), Bus()
        for bus in (fast, plain):
            bus.starts, bus.ends, bus.busy = list(reserved.starts), list(reserved.ends), reserved.busy
        got = _bursts_one_in_flight(fast, req, groups, L, bpb)
        want, r = None, req
        for count, beats in groups:
            occ = max(1, int(-(-beats * bpb // 1)))
            for _ in range(count):
                want = r = plain.alloc(r + L, occ) + beats
        assert got == want, (seed, trial)
        assert fast.busy == plain.busy
        assert _merged(fast.starts, fast.ends) == _merged(plain.starts, plain.ends)
        assert all(s < e for s, e in zip(fast.starts, fast.ends))
        assert all(e <= s for e, s in zip(fast.ends, fast.starts[1:]))  # sorted, disjoint
