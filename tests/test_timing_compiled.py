"""The compiled emulator core against the Python model: the timing passes (`emulator._timing_core`,
overlapped and serial) and the functional pass's hot instructions (`emulator._functional_core`).

On generated programs (every chip of chip_configs/, 1 to 64 cores, private and shared
banks, barriers, core ops, every DMA and channel variant that takes another path through
the pass: bursts one or several in flight, back to back, waiting for bus gaps, small
bursts, one outstanding transfer, too few bank or shared channels, a wide or narrow front
end): every cycle, stall and counter of every core, the bus's busy cycles and the traces
identical to `emulator.timing.run_overlapped` (itself held to the reference loop by
tests/test_timing_fast_paths.py), and to the reference loop directly on a few. Then whole
runs: counters, traces and the DRAM image of `run()` the same with DSE_EMULATOR_CORE=python.
Functional: the machine's records, DRAM, bank bytes and counters the same as the Python
loop's on tiled matmuls (the fast paths' shapes, and the shapes they leave to the handlers)
and generated programs; errors the handlers' own.
"""

from __future__ import annotations

import copy
import sys

import numpy as np
import pytest

from emulator import Barrier, CoreOp, DramTensor, Fence, Matmul, Mset, Mvin, Mvout, Program, Transpose, run
from emulator import compiled as core_choice
from emulator.errors import EmulatorError, ProgramError
from emulator.machine import BARRIER, FENCE, Machine
from emulator.timing import _Trace, run_overlapped as run_python, run_serial as run_serial_python
from emulator.compiled import compiled
from emulator.timing_reference import core_proc_reference
from test_timing_fast_paths import chip, summary

OUT = 1 << 19  # each core's stores go to OUT + core * 16384


def generated_program(rng, c, cores: int, barriers: int) -> Program:
    """Per core, 30 to 90 instructions: loads (1 to 64 beats, contiguous or strided, into
    private or shared banks), matrix ops (accumulating or not, both dataflows, base rows, A
    from shared memory or a one- or two-column bank, 3 or 16 rows), transposes, stores, fences, core ops, a bank freed and taken
    again, and `barriers` barriers on every core."""
    sm = c.shared_memory
    shared = [sm.first_bank_id + s for s in range(min(sm.banks, 4))] if sm.enabled else []
    seeds = rng.integers(0, 2 ** 31, cores)

    def build(core):
        r = np.random.default_rng(int(seeds[core]))
        has_transpose = c.core_chip(core).ball("transpose") is not None
        col_a = int(r.choice([1, 2]))  # A in a two-column bank on some cores: whole-row counts
        prog = [Mset(0, col_a), Mset(1, 1), Mset(2, 4), Mset(3, 1)]
        n = int(r.integers(30, 90))
        at = set(r.choice(np.arange(1, n), barriers, replace=False).tolist()) if barriers else set()
        out = OUT + core * 16384
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
                # M = 3: A ends inside a row of a two-column bank (the handler's partial counts)
                prog.append(Matmul(a, 1, 2, int(r.choice([16, 16, 3])), 16, int(r.choice([16, 32])),
                                   dataflow=str(r.choice(["ws", "os"])), accumulate=bool(r.random() < 0.6),
                                   a_row=int(r.choice([0, 0, 1])), c_row=int(r.choice([0, 0, 4]))))
            elif x < 0.62 and has_transpose:
                prog.append(Transpose(0, 3, 16))
            elif x < 0.78:
                src = int(r.choice([2, 2] + shared[1:2])) if shared else 2
                prog.append(Mvout(src, out + int(r.integers(0, 32)) * 64, int(r.integers(1, 65)),
                                  int(r.choice([0, 64]))))
            elif x < 0.82:
                k = int(r.integers(1, 200))
                prog.append(CoreOp("copy", DramTensor(out + 12288, (k,)), (DramTensor(out, (k,)),)))
            elif x < 0.87:
                prog += [Mset(3, alloc=False), Mset(3, 1)]
            else:
                prog.append(Fence())
        return prog + [Mset(b, alloc=False) for b in (0, 1, 2, 3)]

    return Program.spmd(build, cores, dram_bytes=OUT + cores * 16384)


def timed(records, c, prog, run_overlapped, **kw):
    """Every figure of the overlapped pass, and its traces."""
    tr = _Trace()
    times, busy = run_overlapped(records, c, tr, lambda core, pc: prog.cores[core][pc].op, **kw)
    return summary(times, busy), tr.itrace, tr.mtrace, tr.pmctrace


def compiled_run(records, c, trace, op_names):
    times = [core_choice.CoreTimes(len(c.balls)) for _ in records]
    return times, compiled().run_overlapped(records, c, times, trace, op_names)


def assert_alike(name, cores, sections, seed, reference=False):
    c = chip(name, **copy.deepcopy(sections))
    prog = generated_program(np.random.default_rng(seed), c, cores, barriers=2 if cores > 1 else 1)
    m = Machine(c, prog, prog.image(), functional=False, trace=True)
    m.run()
    got = timed(m.records, c, prog, compiled_run)
    want = timed(m.records, c, prog, run_python, **({"proc": core_proc_reference} if reference else {}))
    assert got[0] == want[0]
    assert got[1:] == want[1:]
    figures = got[0]
    assert figures[-1] > 0 and all(f[0] > 0 for f in figures[:-1])  # the bus carried bursts; every core ran
    assert len(got[1]) == 2 * sum(len(p) for p in prog.cores)


GOBAN_DMA = [
    {},  # one burst in flight, shared memory, 4 cores a tile
    {"dma": {"bursts_in_flight": 2, "inflight_requests": 2}},  # bursts side by side
    {"dma": {"bursts_in_flight": 4, "inflight_requests": 3}},  # k = min of the two
    {"dma": {"latency_cycles": 3}},  # bursts back to back: the bus's merges
    {"dma": {"latency_cycles": 0, "system_bus_bytes": 8}},  # no latency, a beat 2 bus cycles
    {"dma": {"system_bus_bytes": 4}},  # a beat holds the bus 4 cycles: gaps searched
    {"dma": {"system_bus_bytes": 32}},  # half a bus cycle a beat
    {"dma": {"burst_max_bytes": 64}},  # 4-beat bursts: many a transfer
    {"dma": {"outstanding": 1}},  # one transfer at a time
]
GOBAN_CHANNELS = [
    {"banks": {"channels": 6}},  # a matrix op and a transfer cannot share the channels
    {"banks": {"channels": 6}, "shared_memory": {"channels": 2}},  # few shared channels
    {"banks": {"channels": 6}, "dma": {"latency_cycles": 2}, "front_end": {"rob_entries": 4}},
    {"front_end": {"issue_per_cycle": 2, "ball_queue_depth": 1}},  # two issues a cycle
    {"front_end": {"issue_per_cycle": 3, "rob_entries": 5, "issue_delay": 0, "fence_cycles": 3,
                   "barrier_cycles": 0, "mset_cycles": 0}},
]


@pytest.mark.parametrize("sections", GOBAN_DMA + GOBAN_CHANNELS)
@pytest.mark.parametrize("cores", [1, 2, 4])
def test_goban_variants_time_alike(sections, cores):
    for seed in range(2):
        assert_alike("goban", cores, sections, seed)


@pytest.mark.parametrize("name, cores", [("toy", 1), ("pebble", 1), ("poly", 5), ("poly", 3), ("poly", 1)])
@pytest.mark.parametrize("seed", range(3))
def test_every_chip_times_alike(name, cores, seed):
    assert_alike(name, cores, {}, seed)


@pytest.mark.parametrize("cores, tile, dma", [
    (64, 8, {}),  # 8 tiles of 8, shared memory each, one bus
    (64, 64, {"bursts_in_flight": 2, "inflight_requests": 2}),  # one tile of 64
    (16, 1, {"latency_cycles": 3}),  # a tile a core: barriers alone
    (37, 4, {"system_bus_bytes": 4}),  # a last tile of one core
])
def test_many_cores_time_alike(cores, tile, dma):
    assert_alike("goban", cores, {"cores": {"count": cores, "tile_size": tile}, "dma": dma}, cores)


@pytest.mark.parametrize("name, cores, sections", [
    ("goban", 4, {"dma": {"bursts_in_flight": 2, "inflight_requests": 2}}),
    ("goban", 1, {}),
    ("poly", 5, {"front_end": {"issue_per_cycle": 2}}),
])
def test_compiled_equals_the_reference_loop(name, cores, sections):
    assert_alike(name, cores, sections, 11, reference=True)


def test_tiled_matmul_times_alike():
    """The bench's program, smaller, on 4 cores and on 1."""
    from emulator.programs import tiled_matmul
    c = chip("goban")
    for cores in (4, 1):
        prog = tiled_matmul(128, 128, 128, 16, 16, 16, cores=cores)
        m = Machine(c, prog, prog.image(), functional=False, trace=True)
        m.run()
        assert timed(m.records, c, prog, compiled_run) == timed(m.records, c, prog, run_python)


def compiled_serial(records, c, trace, op_names):
    times = [core_choice.CoreTimes(len(c.balls)) for _ in records]
    compiled().run_serial(records, c, times, trace, op_names)
    return times, 0


def python_serial(records, c, trace, op_names):
    return run_serial_python(records, c, trace, op_names), 0


@pytest.mark.parametrize("name, cores, tile", [("goban", 4, 4), ("goban", 64, 8), ("goban", 6, 2), ("poly", 5, 5),
                                               ("toy", 1, 1), ("pebble", 1, 1)])
def test_serial_times_alike(name, cores, tile):
    c = chip(name, cores={"count": cores, "tile_size": tile}) if name == "goban" else chip(name)
    for seed in range(2):
        prog = generated_program(np.random.default_rng(seed), c, cores, barriers=2)
        m = Machine(c, prog, prog.image(), functional=False, trace=True)
        m.run()
        got = timed(m.records, c, prog, compiled_serial)
        assert got == timed(m.records, c, prog, python_serial)
        assert all(f[0] > 0 and f[3]["barrier"] > 0 for f in got[0][:-1])


def _counter_rows(result):
    return [(k.name, k.where, k.value) for k in result.counters if not k.name.startswith("host_")]


@pytest.mark.parametrize("name, cores, mode", [("goban", 4, "overlapped"), ("toy", 1, "overlapped"),
                                               ("goban", 4, "serial")])
def test_runs_alike_with_either_core(monkeypatch, name, cores, mode):
    """`run()` end to end: every counter, the traces and the final DRAM image."""
    c = chip(name)
    prog = generated_program(np.random.default_rng(5), c, cores, barriers=1)
    dram = np.random.default_rng(6).integers(0, 256, prog.dram_bytes, dtype=np.uint8)
    monkeypatch.setenv(core_choice.ENV, "python")
    want = run(prog, c, dram, trace=True, mode=mode)
    monkeypatch.setenv(core_choice.ENV, "compiled")
    got = run(prog, c, dram, trace=True, mode=mode)
    assert got.cycles == want.cycles > 0
    assert _counter_rows(got) == _counter_rows(want)
    for kind in ("itrace", "mtrace", "pmctrace"):
        assert got.trace.ndjson(kind) == want.trace.ndjson(kind)
    assert np.array_equal(got.dram, want.dram)
    assert not np.array_equal(got.dram, dram)  # the stores and core ops wrote DRAM


def test_a_barrier_never_met_is_the_same_error():
    c = chip("goban")
    records = [[(BARRIER, 0, 0, 0, (), (), False, 0, 0, None, None)], [(FENCE, 0, 0, 0, (), (), False, 0, 0, None, None)]]
    with pytest.raises(ProgramError) as want:
        run_python(records, c)
    with pytest.raises(ProgramError) as got:
        compiled_run(records, c, None, None)
    assert str(got.value) == str(want.value) == ("cores wait at a barrier that other cores of their tile never "
                                                 "reach: {0: [0]}")


def test_an_unknown_core_name_is_refused(monkeypatch):
    monkeypatch.setenv(core_choice.ENV, "fortran")
    with pytest.raises(EmulatorError, match=r"DSE_EMULATOR_CORE='fortran': allowed compiled, python"):
        core_choice.selected()


def test_a_missing_build_says_make_install(monkeypatch):
    monkeypatch.setattr(core_choice, "_compiled", None)
    monkeypatch.setitem(sys.modules, "emulator._timing_core", None)  # what an import of an unbuilt module raises
    monkeypatch.delenv(core_choice.ENV, raising=False)
    c = chip("toy")
    prog = generated_program(np.random.default_rng(1), c, 1, barriers=0)
    with pytest.raises(core_choice.CoreNotBuilt, match="run `make install`, or set DSE_EMULATOR_CORE=python"):
        run(prog, c)
    monkeypatch.setenv(core_choice.ENV, "python")
    assert run(prog, c).cycles > 0


# ------------------------------------------------------------------ the functional pass
def machine_state(m: Machine):
    """Everything the functional pass leaves: records, DRAM, bank bytes, every counter."""
    m._flush_all()
    return (m.records, m.img.tobytes(), [x.tobytes() for x in m.mem], m.rows_read, m.rows_written, m.bytes_in,
            m.bytes_out, m.bursts, m.transfers_in, m.transfers_out, m.macs, m.vec_macs, m.peak_rows,
            m.core_elements, m.shared_rows_read, m.shared_rows_written)


def machines_alike(monkeypatch, c, prog, img, **kw):
    states = []
    for core in ("python", "compiled"):
        monkeypatch.setenv(core_choice.ENV, core)
        m = Machine(c, prog, img.copy(), **kw)
        m.run()
        states.append(machine_state(m))
    assert states[0] == states[1]
    return states[1]


@pytest.mark.parametrize("name, cores", [("toy", 1), ("goban", 4)])
@pytest.mark.parametrize("layout, tk", [("blocked", 32), ("rowmajor", 32), ("rowmajor", 48)])
@pytest.mark.parametrize("functional", [True, False])
def test_tiled_matmul_executes_alike(monkeypatch, name, cores, layout, tk, functional):
    """The compiled MVIN and matrix-Ball paths (blocked: single-column operand banks;
    rowmajor: operands in banks of tk / 16 columns) and the handlers they leave the other
    shapes to (rowmajor's strided loads)."""
    from emulator.programs import matmul_inputs, tiled_matmul
    c = chip(name)
    prog = tiled_matmul(64, 64, 192, 16, 16, tk, cores=cores, layout=layout)
    a, bt, vals = matmul_inputs(64, 64, 192, 16, 16, tk, layout=layout)
    state = machines_alike(monkeypatch, c, prog, prog.image(vals), functional=functional)
    if functional:
        got = np.frombuffer(state[1], np.uint8)[prog.outputs["C"].addr:][:64 * 64 * 4].view(np.int32).reshape(64, 64)
        assert np.array_equal(got, a.astype(np.int32) @ bt.T.astype(np.int32))


@pytest.mark.parametrize("name, cores", [("toy", 1), ("goban", 4), ("poly", 5), ("pebble", 1)])
def test_generated_programs_execute_alike(monkeypatch, name, cores):
    c = chip(name)
    for seed in range(3):
        prog = generated_program(np.random.default_rng(seed), c, cores, barriers=1)
        img = np.random.default_rng(seed).integers(0, 256, prog.dram_bytes, dtype=np.uint8)
        machines_alike(monkeypatch, c, prog, img)


@pytest.mark.parametrize("bad, message", [
    (Mvin(0, (1 << 20) - 64, 8), "DRAM bytes [0xfffc0, 0x100040) are outside the 1048576-byte DRAM image"),
    (Mvin(5, 0, 8), "destination bank 5 is not allocated (MSET it first)"),
    (Matmul(0, 1, 2, 16, 16, 24), "M, N, K must be positive with K a multiple of 16"),
    (Matmul(0, 1, 6, 16, 16, 16), "C bank 6 is not allocated"),
    (Matmul(0, 1, 2, 16, 16, 1024, a_row=1), "A needs rows 1..1024 of bank 0"),
])
def test_errors_are_the_handlers(monkeypatch, bad, message):
    """A fast path that meets anything odd leaves the instruction to its Python handler,
    whose error (core, instruction, operands) is the same on either core."""
    c = chip("toy")
    prog = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4), Mset(6, 1), Mset(6, alloc=False), Mvin(0, 0, 16),
                     Mvin(1, 256, 16), Matmul(0, 1, 2, 16, 16, 16), bad]], dram_bytes=1 << 20)
    errors = []
    for core in ("python", "compiled"):
        monkeypatch.setenv(core_choice.ENV, core)
        with pytest.raises(EmulatorError) as exc:
            run(prog, c)
        errors.append(str(exc.value))
    assert errors[0] == errors[1]
    assert "core 0, instruction #8" in errors[1] and message in errors[1]


def test_the_compiled_bus_places_bursts_as_the_python_bus():
    """The compiled bus's first-fit search (galloping from where the last burst went) gives
    the Python `Bus`'s starts and busy intervals: transfers of bursts from several cores
    interleaved (each a burst after its previous one's end plus a latency, as a DMA's), lone
    requests far back and far ahead of the last burst, and pruning."""
    from emulator._timing_core import bus_allocs
    from emulator.timing import Bus
    rng = np.random.default_rng(11)
    for trial in range(6):
        requests, horizon = [], 0
        reqs = [0, 0, 0, 0]  # each core's next request
        for _ in range(400):
            roll = rng.random()
            if roll < 0.05:
                horizon += int(rng.integers(0, 400))
                requests.append(("prune", horizon))
                continue
            if roll < 0.15:  # a lone burst anywhere from the horizon on
                requests.append((horizon + int(rng.integers(0, 20000)), int(rng.integers(1, 9))))
                continue
            c = int(rng.integers(0, 4))
            req, occ, lat = max(reqs[c], horizon), int(rng.integers(1, 5)), (100, 3, 0)[trial % 3]
            for _ in range(int(rng.integers(1, 40))):  # a transfer: its bursts one after another
                requests.append((req + lat, occ))
                req += lat + occ
            reqs[c] = req
        bus, want = Bus(), []
        for q in requests:
            if q[0] == "prune":
                bus.prune(q[1])
            else:
                want.append(bus.alloc(*q))
        assert sum(w != q[0] for w, q in zip(want, (q for q in requests if q[0] != "prune"))) > 20  # bursts moved
        got, intervals = bus_allocs(requests)
        assert got == want
        assert intervals == list(zip(bus.starts, bus.ends))
