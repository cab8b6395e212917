"""``run(program, chip, dram)``: execute functionally, time it, count it, optionally trace it."""

from __future__ import annotations

import gc
import json
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .compiled import run_overlapped, run_serial
from .counters import Counters
from .errors import ProgramError
from .machine import Machine
from .prefault import populating
from .program import Program, read_region
from .timing import STALL_CAUSES, _Trace

MODES = ("overlapped", "serial")

_gc_lock = threading.Lock()
_gc_holders = 0  # runs that paused the cyclic collector and have not finished (any thread)
_gc_was_enabled = True


@contextmanager
def _collector_paused():
    """The cyclic garbage collector off while a run executes, as it was before once the last
    concurrent run is done. A run makes a record an instruction and the timing pass more
    tuples, all long-lived containers that every collection walks again: 20% of the
    4-core matmul's run; a run makes no reference cycles (refcounting frees what it drops)."""
    global _gc_holders, _gc_was_enabled
    with _gc_lock:
        if _gc_holders == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_holders += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holders -= 1
            if _gc_holders == 0 and _gc_was_enabled:
                gc.enable()


@dataclass
class Trace:
    """Opt-in traces in the framework's NDJSON shapes.

    * ``itrace``: ``{"event": "issue"|"complete", "core", "pc", "rob_id", "op", "cycle"}``
      (issue = entering the Ball/DMA queue, or the cycle a FENCE/BARRIER/core op began);
    * ``mtrace``: ``{"event": "read"|"write", "core", "pc", "bank", "col", "row", "rows",
      "cycle"}`` one line per bank operand (``bank`` the first physical bank, or
      ``"shared s"``; rows of that virtual bank; reads at start, writes at completion);
    * ``pmctrace``: ``{"event": "ball", "ball_id", "rob_id", "elapsed", "core"}`` for Ball ops
      (``ball_id`` = index in ``chip.balls``, ``elapsed`` = start to completion) and
      ``{"event": "load"|"store", ...}`` for MVIN/MVOUT.
    """

    itrace: list[dict] = field(default_factory=list)
    mtrace: list[dict] = field(default_factory=list)
    pmctrace: list[dict] = field(default_factory=list)

    def ndjson(self, kind: str) -> str:
        return "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in getattr(self, kind))

    def write(self, directory: str | Path) -> dict[str, Path]:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        out = {}
        for kind in ("itrace", "mtrace", "pmctrace"):
            p = d / f"{kind}.ndjson"
            p.write_text(self.ndjson(kind))
            out[kind] = p
        return out


@dataclass
class Result:
    outputs: dict[str, np.ndarray]
    counters: Counters
    trace: Trace | None = None
    dram: np.ndarray | None = None  # the final DRAM image
    mode: str = "overlapped"
    cycles: int = 0  # the chip's emulated cycles (also counters.value("cycles"))


def _image(program: Program, dram, in_place: bool = False) -> np.ndarray:
    if in_place:
        if not (isinstance(dram, np.ndarray) and dram.dtype == np.uint8 and dram.ndim == 1
                and dram.flags.writeable and dram.flags.c_contiguous):
            raise ProgramError("in_place=True takes the DRAM image itself: a writeable, contiguous 1-D uint8 "
                               f"array (got {type(dram).__name__})")
        return dram
    if dram is None:
        return program.image()
    if isinstance(dram, Mapping):
        return program.image(dram)
    if isinstance(dram, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(dram), dtype=np.uint8).copy()
    arr = np.asarray(dram)
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise ProgramError(f"a DRAM image is a 1-D uint8 array (got {arr.dtype} {arr.shape}); "
                           f"or pass a mapping of input names to arrays")
    return arr.copy()


def run(program: Program, chip, dram: Any = None, *, mode: str = "overlapped", trace: bool = False,
        functional: bool = True, in_place: bool = False, boundary=None, cuts=None) -> Result:
    """Run `program` on `chip` with DRAM image `dram`.

    `dram` is a 1-D uint8 array (or bytes) - the whole image, copied, never modified - or a
    mapping from the program's input names to arrays (written into a zero image of
    ``program.dram_bytes``), or None (a zero image). `mode` is ``"overlapped"`` or
    ``"serial"`` (see :mod:`emulator.timing`). ``trace=True`` collects NDJSON traces.
    ``functional=False`` skips the arithmetic (outputs are then meaningless) but keeps every
    check and the timing. ``in_place=True`` runs on `dram` itself (a writeable 1-D uint8
    array), not a copy, for a caller that needs the initial image no more: a real layer's
    image is gigabytes, and a copy would also make every page of its zero part resident.
    `boundary(e)`: called in the functional pass after every core has run its e-th barrier
    epoch (`Machine.run`), e.g. to check and let go of what the ops closed there wrote; its
    time is not counted in ``host_functional_seconds``. `cuts`: a one-core program's further
    epoch ends, pcs (`Machine.run`).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    with _collector_paused():
        return _run(program, chip, dram, mode, trace, functional, in_place, boundary, cuts)


def _run(program: Program, chip, dram, mode: str, trace: bool, functional: bool, in_place: bool,
         boundary=None, cuts=None) -> Result:
    t0 = time.perf_counter()
    img = _image(program, dram, in_place)
    machine = Machine(chip, program, img, functional=functional, trace=trace)
    t1 = time.perf_counter()
    with populating(program, img, machine.records, machine.chip) if functional else nullcontext():
        machine.run(boundary, cuts)
    t2 = time.perf_counter()
    tr = Trace() if trace else None
    trace_sink = None
    if trace:
        trace_sink = _Trace()
    cores = program.cores

    def op_names(c, pc):
        return cores[c][pc].op

    if mode == "serial":
        times = run_serial(machine.records, chip, trace_sink, op_names)
        beats = -(-(sum(machine.bytes_in) + sum(machine.bytes_out)) // chip.dma.system_bus_bytes)
        bus_busy = beats
    else:
        times, bus_busy = run_overlapped(machine.records, chip, trace_sink, op_names)
    t3 = time.perf_counter()
    if trace:
        tr.itrace, tr.mtrace, tr.pmctrace = trace_sink.itrace, trace_sink.mtrace, trace_sink.pmctrace
    outputs = {name: read_region(img, region, name) for name, region in program.outputs.items()}
    counters = _counters(chip, machine, times, bus_busy, t1 - t0, t2 - t1 - machine.boundary_seconds, t3 - t2)
    chip_cycles = max((t.cycles for t in times), default=0)
    return Result(outputs, counters, tr, img, mode, chip_cycles)


def _counters(chip, m: Machine, times, bus_busy, setup, functional, timing) -> Counters:
    cs = Counters([])
    add = cs.add
    add("cycles", max((t.cycles for t in times), default=0), "chip")
    rb = chip.banks.row_bytes
    for c, t in enumerate(times):
        add("cycles", t.cycles, "core", core=c)
        add("instructions", t.instructions, "core", core=c)
        add("core_ops", t.core_ops, "core", core=c)
        busy = t.busy()
        add("busy_cycles", busy, "core", core=c)
        add("idle_cycles", max(0, t.cycles - busy), "core", core=c)
        for cause in STALL_CAUSES:
            add(f"stall_{cause}_cycles", t.stalls[cause], "core", core=c)
        add("core_op_cycles", t.core_op_cycles, "core", core=c)
        add("core_op_elements", m.core_elements[c], "core", core=c)
        add("peak_allocated_rows", m.peak_rows[c], "core", core=c)
        add("peak_allocated_bytes", m.peak_rows[c] * rb, "core", core=c)
        add("dma_bytes_in", m.bytes_in[c], "core", core=c)
        add("dma_bytes_out", m.bytes_out[c], "core", core=c)
        add("dma_transfers_in", m.transfers_in[c], "core", core=c)
        add("dma_transfers_out", m.transfers_out[c], "core", core=c)
        add("dma_bursts", m.bursts[c], "core", core=c)
        add("dma_busy_cycles", t.dma_busy(), "core", core=c)
        add("dma_bus_wait_cycles", t.bus_wait, "core", core=c)
        for i, ball in enumerate(chip.balls):
            add("ball_ops", t.ball_ops[i], "ball", core=c, ball=ball.kind, ball_id=i)
            add("ball_busy_cycles", t.ball_busy[i], "ball", core=c, ball=ball.kind, ball_id=i)
            if ball.kind in ("matrix", "vecmatmul"):
                add("ball_macs", (m.macs if ball.kind == "matrix" else m.vec_macs)[c], "ball", core=c,
                    ball=ball.kind, ball_id=i)
        for p in range(len(m.rows_read[c])):  # the core's own banks (its group's geometry)
            add("rows_read", m.rows_read[c][p], "bank", core=c, bank=p)
            add("rows_written", m.rows_written[c][p], "bank", core=c, bank=p)
        add("channel_conflicts", t.channel_conflicts, "channel", core=c)
        add("shared_channel_conflicts", t.shared_channel_conflicts, "channel", core=c)
        add("channel_wait_cycles", t.channel_wait, "channel", core=c)
    sm = chip.shared_memory
    for tile, banks in enumerate(m.shared_banks):
        add("shared_bytes_used", len(banks) * sm.rows * sm.row_bytes, "bank", tile=tile)
    for tile, (rd, wr) in enumerate(zip(m.shared_rows_read, m.shared_rows_written)):
        for s in range(len(rd)):
            if rd[s] or wr[s]:
                add("rows_read", rd[s], "bank", tile=tile, bank=f"shared {s}")
                add("rows_written", wr[s], "bank", tile=tile, bank=f"shared {s}")
    add("bus_busy_cycles", bus_busy, "channel", channel="system_bus")
    add("host_setup_seconds", setup, "host")
    add("host_functional_seconds", functional, "host")
    add("host_timing_seconds", timing, "host")
    add("host_exec_seconds", functional + timing, "host")
    return cs
