"""The DRAM image's written chunks populated on a helper thread (`emulator.prefault`): which
chunks, in what order, how far ahead, and a run's bits and counters the same with it."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from emulator import Barrier, CoreOp, DramTensor, Fence, Mset, Mvin, Mvout, Program, run
from emulator import prefault
from test_timing_fast_paths import chip

C = prefault.CHUNK


def test_written_chunks_in_the_order_the_run_writes_them():
    """rb 16. Core 0: a 2-column bank's 4 lines out at 0 (rows of 32 bytes, extent 64: chunk
    0), then after the barrier a core op's 16 bytes across the chunk 2/3 boundary. Core 1: 3
    lines 4 chunks apart (each row its own chunk: 1, 5, 9), then, after the barrier, chunk 0
    again (written first by core 0: not again). Epoch by epoch, core by core."""
    core0 = [Mset(0, 2), Mvout(0, 0, 4), Barrier(),
             CoreOp("fill", DramTensor(3 * C - 8, (4,), "fp32"), (), {"value": 1.0})]
    core1 = [Mset(5, 1), Mvout(5, C, 3, 4 * C), Barrier(), Mvout(5, 0, 1)]
    prog = Program([core0, core1], dram_bytes=12 * C)
    assert prefault.written_chunks(prog, chip("toy")) == [(0, 1, 0, 1), (1, 1, 1, 2), (1, 1, 5, 6), (1, 1, 9, 10),
                                                 (0, 3, 2, 4)]


def test_a_strided_destination_covers_its_extent():
    """A core op writing every other 1 KB of 3 MB (strides within a chunk) and an MVOUT of a
    1-column bank at a stride under a chunk: the chunks from first to last byte."""
    prog = Program([[CoreOp("fill", DramTensor(C - 4, (3 * 1024, 4), "fp32", (1024, 4)), (), {"value": 0.0}),
                     Mset(1, 1), Mvout(1, 5 * C, 4, C // 2)]], dram_bytes=8 * C)
    # the core op: bytes C - 4 .. C - 4 + 3071 x 1024 + 16, chunks 0..2; the MVOUT 5C .. 6.5C + 16
    assert prefault.written_chunks(prog, chip("toy")) == [(0, 0, 0, 3), (0, 2, 5, 7)]


def test_a_long_run_of_chunks_comes_in_pieces():
    """A 40 MB destination (20 chunks): pieces of PIECE chunks, so that no one call runs past
    the window or a stop."""
    prog = Program([[CoreOp("fill", DramTensor(0, (20 * C // 4,), "fp32"), (), {"value": 0.0})]], dram_bytes=20 * C)
    assert prefault.PIECE == 8
    assert prefault.written_chunks(prog, chip("toy")) == [(0, 0, 0, 8), (0, 0, 8, 16), (0, 0, 16, 20)]


def _populated(monkeypatch):
    calls = []
    real = prefault._libc_madvise()
    if not real:
        pytest.skip("no madvise")

    def recording(addr, n, advice):
        calls.append((addr, n))
        return real(addr, n, advice)

    monkeypatch.setattr(prefault, "_madvise", recording)
    return calls


def test_the_helper_populates_ahead_within_its_window_and_keeps_the_bytes(monkeypatch):
    """Chunks the run has not reached are populated in order, up to WINDOW bytes past the run
    (records so far); chunks it is past are left; the image's bytes are not touched."""
    calls = _populated(monkeypatch)
    img = np.zeros(8 * C, np.uint8)
    img[::4097] = 7
    want = img.copy()
    base = img.ctypes.data
    chunks = [(0, 3, 0, 1), (0, 5, 2, 4), (0, 9, 5, 6), (0, 12, 7, 8)]
    records = [[None] * 4]  # the run has done pc 0..3: the first run of chunks is behind it
    monkeypatch.setattr(prefault, "WINDOW", 3 * C)  # two runs (3 chunks) ahead, then wait
    stop = threading.Event()
    t = threading.Thread(target=prefault._helper, args=(img, chunks, records, stop))
    t.start()
    deadline = time.monotonic() + 60  # the two calls, however slowly a loaded machine runs the thread
    while len(calls) < 2 and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    t.join(0.3)  # time for a third call it must not make
    assert t.is_alive()  # waiting for the run

    def span(k0, k1):  # chunks k0 .. k1 - 1 of the image, from the start of their first page
        a = (base + k0 * C) & ~4095
        return a, base + k1 * C - a
    assert calls == [span(2, 4), span(5, 6)]
    records[0].extend([None] * 6)  # past pc 9: room for the last
    t.join(5)
    assert not t.is_alive()
    assert calls[2:] == [span(7, 8)]
    assert np.array_equal(img, want)


def test_a_run_is_the_same_with_the_helper(monkeypatch):
    """A run on a 64 MB image writing across chunks (MVOUTs across chunk boundaries, a core op):
    the same DRAM image and counters with the helper and without it (MIN_IMAGE past it)."""
    c = chip("toy")
    rng = np.random.default_rng(3)
    body = [Mset(0, 1), Mset(1, 1)]
    for i in range(6):
        body += [Mvin(0, 64 * i, 4), Mvout(0, (5 + 3 * i) * C - 4096, 4, C // 8)]
    scaled = CoreOp("scale", DramTensor(24 * C - 512, (4096, 64), "fp32"), (DramTensor(4096, (4096, 64), "fp32"),),
                    {"scale": 0.5})
    body += [Fence(), scaled, Fence()]
    prog = Program([body], dram_bytes=prefault.MIN_IMAGE)
    img = np.zeros(prefault.MIN_IMAGE, np.uint8)
    img[:4096 + 4096 * 256] = rng.integers(0, 256, 4096 + 4096 * 256, dtype=np.uint8)
    img[4096:4096 + 4096 * 256].view(np.float32)[:] = rng.standard_normal(4096 * 64, dtype=np.float32)
    calls = _populated(monkeypatch)
    with_helper = run(prog, c, img.copy())
    assert all(a % 4096 == 0 for a, _ in calls)  # whole pages (how many: a race with the run)
    monkeypatch.setattr(prefault, "MIN_IMAGE", 1 << 62)
    without = run(prog, c, img.copy())
    assert np.array_equal(with_helper.dram, without.dram)
    assert with_helper.cycles == without.cycles

    def rows(r):
        return [row for row in r.counters.rows() if not row["name"].startswith("host_")]
    assert rows(with_helper) == rows(without)
