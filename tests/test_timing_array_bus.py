"""`emulator.timing.ArrayBus` (the system bus of `run_overlapped`, held in numpy arrays)
against `Bus` (the list-based bus it replaced there): generated reservations give the same
answers and the same busy set, and generated multi-core programs timed on either give the
same cycles, stalls and counters, core by core."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import numpy as np
import pytest

from emulator import Fence, Matmul, Mset, Mvin, Mvout, Program
from emulator.chip import chip_from_dict
from emulator.machine import Machine
from emulator.timing import ArrayBus, Bus, _bursts_on_array_bus, _bursts_one_in_flight, run_overlapped

CONFIGS = Path(__file__).resolve().parents[1] / "chip_configs"


def chip(name: str, **sections):
    with open(CONFIGS / f"{name}.toml", "rb") as f:
        d = tomllib.load(f)
    d = copy.deepcopy(d)
    for section, fields in sections.items():
        d.setdefault(section, {}).update(fields)
    return chip_from_dict(d)


def union(starts, ends) -> list[list[int]]:
    out: list[list[int]] = []
    for s, e in zip(starts, ends):
        assert s < e
        assert not out or out[-1][1] <= s  # sorted, disjoint
        if out and out[-1][1] == s:
            out[-1][1] = e
        else:
            out.append([s, e])
    return out


def test_array_bus_by_hand():
    bus = ArrayBus()
    assert bus.alloc(10, 4) == 10  # [10, 14)
    assert bus.alloc(12, 4) == 14  # meets [10, 14): right after it, [14, 18)
    assert bus.alloc(0, 10) == 0  # the gap [0, 10) fits exactly
    assert bus.alloc(0, 1) == 18  # no gap before 18
    assert union(bus.starts, bus.ends) == [[0, 19]] and bus.busy == 19
    # bursts every 10 cycles from 25, 2 long: the fourth, [55, 57), meets [56, 60)
    assert bus.alloc(56, 4) == 56
    assert bus.run(25, 6, 10, 2) == 3
    assert union(bus.starts, bus.ends) == [[0, 19], [25, 27], [35, 37], [45, 47], [56, 60]]
    assert bus.run(100, 3, 10, 2) == 3 and bus.ends[-1] == 122
    assert bus.busy == 19 + 4 + 6 + 6
    assert bus.run(1000, 40, 10, 2) == 40  # nothing after 122: all 40, [1000 + 10 j, + 2)
    bus.prune(1385)  # more than 32 intervals end by then: forgotten
    assert list(bus.starts) == [1390] and list(bus.ends) == [1392] and bus.busy == 35 + 80


def after(bus, horizon: int) -> list[list[int]]:
    """The bus's busy set from `horizon` on (what a request at or after it can meet)."""
    kept = [(max(s, horizon), e) for s, e in zip(bus.starts, bus.ends) if e > horizon]
    return union([s for s, _ in kept], [e for _, e in kept])


@pytest.mark.parametrize("seed", range(8))
def test_array_bus_reserves_as_bus_does(seed):
    rng = np.random.default_rng(seed)
    listed, arrayed = Bus(), ArrayBus()
    horizon = 0
    for _ in range(600):
        t = horizon + int(rng.integers(0, 3000))
        if rng.random() < 0.3:
            n, step, occ = int(rng.integers(1, 40)), int(rng.integers(2, 120)), 0
            occ = int(rng.integers(1, step))
            got = arrayed.run(t, n, step, occ)
            # the run's first `got` bursts are free and reserved, burst `got` (if any) is not
            for j in range(got):
                assert listed.alloc(t + j * step, occ) == t + j * step
            if got < n:
                probe = Bus()
                probe.starts, probe.ends = list(listed.starts), list(listed.ends)
                assert probe.alloc(t + got * step, occ) != t + got * step
        else:
            n = int(rng.integers(1, 80))
            assert arrayed.alloc(t, n) == listed.alloc(t, n)
        assert arrayed.busy == listed.busy
        if rng.random() < 0.05:
            horizon += int(rng.integers(0, 2000))
            arrayed.prune(horizon)
            listed.prune(horizon)
        assert after(arrayed, horizon) == after(listed, horizon)


@pytest.mark.parametrize("seed", range(6))
def test_bursts_on_array_bus_match_the_list_bus(seed):
    rng = np.random.default_rng(100 + seed)
    L, bpb = 100, [1.0, 0.25, 0.5, 2.0, 0.25, 1.0][seed]
    for trial in range(40):
        listed, arrayed = Bus(), ArrayBus()
        t = int(rng.integers(0, 500))
        for _ in range(int(rng.integers(0, 200))):  # other cores' bursts: some dense, some touching
            t += int(rng.integers(0, 150))
            n = int(rng.integers(1, 30))
            listed.alloc(t, n)
            arrayed.alloc(t, n)
            t += n
        groups = [(int(rng.integers(0, 300)), int(rng.integers(1, 80))) for _ in range(int(rng.integers(1, 4)))]
        req = int(rng.integers(0, 4000))
        assert _bursts_on_array_bus(arrayed, req, groups, L, bpb) == _bursts_one_in_flight(listed, req, groups,
                                                                                           L, bpb), (seed, trial)
        assert arrayed.busy == listed.busy
        assert union(arrayed.starts, arrayed.ends) == union(listed.starts, listed.ends)


def random_program(rng, cores: int) -> Program:
    """Per core: banks set up, then a random mix of row-major tile loads (one burst a row,
    many bursts a transfer, strided), contiguous loads, matrix ops, stores and fences."""
    dram = 1 << 20

    def build(core):
        prog = [Mset(0, 1), Mset(1, 1), Mset(2, 4)]
        for _ in range(int(rng.integers(20, 60))):
            r = rng.random()
            if r < 0.35:
                lines = int(rng.integers(1, 64))
                prog.append(Mvin(int(rng.integers(0, 2)), int(rng.integers(0, 4096)) * 16, lines,
                                 int(rng.choice([0, 16, 64, 4096]))))
            elif r < 0.6:
                prog.append(Matmul(0, 1, 2, 16, 16, 16, accumulate=bool(rng.random() < 0.5)))
            elif r < 0.85:
                prog.append(Mvout(2, (1 << 19) + core * 65536 + int(rng.integers(0, 64)) * 64,
                                  int(rng.integers(1, 65)), int(rng.choice([0, 64, 1024]))))
            else:
                prog.append(Fence())
        return prog + [Mset(b, alloc=False) for b in (0, 1, 2)]

    return Program.spmd(build, cores, dram_bytes=dram)


def summary(times, busy):
    return [(c.cycles, c.instructions, c.core_ops, c.stalls, c.busy(), c.dma_busy(), c.ball_ops, c.ball_busy,
             c.core_op_cycles, c.channel_conflicts, c.channel_wait, c.shared_channel_conflicts, c.bus_wait,
             c.dma_latency_sum) for c in times] + [busy]


@pytest.mark.parametrize("name, dma", [
    ("goban", {}),  # one burst in flight: runs of bursts (`ArrayBus.run`)
    ("goban", {"bursts_in_flight": 2, "inflight_requests": 2}),  # several in flight: burst by burst
    ("goban", {"latency_cycles": 3}),  # bursts back to back, runs meet each other
    ("goban", {"system_bus_bytes": 4}),  # a beat holds the bus 4 cycles: bursts wait for gaps
    ("toy", {}),
])
@pytest.mark.parametrize("seed", range(3))
def test_programs_time_alike_on_either_bus(name, dma, seed):
    rng = np.random.default_rng(seed)
    c = chip(name, dma=dma) if dma else chip(name)
    cores = min(4, c.cores.count)
    prog = random_program(rng, cores)
    m = Machine(c, prog, prog.image(), functional=False)
    m.run()
    fast = summary(*run_overlapped(m.records, c))
    plain = summary(*run_overlapped(m.records, c, bus=Bus()))
    assert fast == plain
    assert fast[-1] > 0  # the bus carried the transfers
