"""The DRAM image's fresh pages made resident on a second thread, ahead of the run that writes them.

A real layer's image is gigabytes, most of it zeros never touched until the run writes an
intermediate there (an MVOUT, a core op's result): the kernel then zeroes each page as it is
first written (2 MB huge pages), on the run's own thread: half or more of a Llama layer's
emulator run at seq 2048. Here a helper thread asks the kernel for those pages first
(``madvise(MADV_POPULATE_WRITE)``: a page already there is left as it is; a page's bytes
are never written, so nothing the run writes can be lost), in the order the run will write
them, while the run computes on the other core.

What it touches: only 2 MB chunks the program writes (its MVOUT rows and core-op
destinations, walked once, in the order `Machine.run` executes them), and at most `WINDOW`
bytes of them ahead of the instruction the run has reached (its records so far), so that
the resident set grows as without it, a little earlier. The bits, cycles and counters are
the run's own: the helper reads nothing and writes nothing of the image.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from contextlib import contextmanager

import numpy as np

from .dram_access import dram_accesses

CHUNK = 1 << 21  # a huge page: the kernel's unit of a fresh fault here
# bytes populated ahead of the run at most: what its peak may grow by (dse emulate gives pages
# back op by op)
WINDOW = 1 << 26
PIECE = 8  # chunks a call at most: the window and a stop are looked at between calls
MIN_IMAGE = 1 << 26  # smaller images: not worth a thread
MADV_POPULATE_WRITE = 23  # Linux 5.14+; older kernels say EINVAL and the helper stops

_madvise = None


def _libc_madvise():
    global _madvise
    if _madvise is None:
        try:
            f = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).madvise
            f.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
            f.restype = ctypes.c_int
            _madvise = f
        except (OSError, AttributeError):
            _madvise = False
    return _madvise


def written_chunks(program, chip) -> list[tuple[int, int, int, int]]:
    """(core, pc, first chunk, end chunk) of each run of chunks (PIECE at most) the program
    writes first at (core, pc), in the order `Machine.run` executes them (epoch by epoch,
    core by core)."""
    order = []  # (epoch, core, pc, start, end) bytes
    for c, pc, epoch, writes, lo, hi, stride, width in dram_accesses(program, chip):
        if not writes:
            continue
        if stride <= CHUNK:  # every chunk of the extent holds a row
            order.append((epoch, c, pc, lo, hi))
        else:
            for a in range(lo, hi, stride):
                order.append((epoch, c, pc, a, min(a + width, hi)))
    order.sort(key=lambda x: x[:3])
    seen: set[int] = set()
    out = []
    for _, c, pc, s, e in order:
        lo, hi = s // CHUNK, -(-e // CHUNK)
        run_lo = None
        for k in range(lo, hi):
            if k in seen:
                if run_lo is not None:
                    out.append((c, pc, run_lo, k))
                    run_lo = None
                continue
            seen.add(k)
            if run_lo is None:
                run_lo = k
        if run_lo is not None:
            out.append((c, pc, run_lo, hi))
    return [(c, pc, k, min(k + PIECE, k1)) for c, pc, k0, k1 in out for k in range(k0, k1, PIECE)]


def _helper(img: np.ndarray, chunks, records, stop: threading.Event) -> None:
    madvise = _libc_madvise()
    base = img.ctypes.data
    lo_addr = base & ~4095  # whole pages of the image's own mapping
    hi_addr = base + img.nbytes
    ahead: list[tuple[int, int, int]] = []  # (core, pc, bytes) populated, not yet reached
    head = 0
    ahead_bytes = 0
    i = 0
    while i < len(chunks) and not stop.is_set():
        while head < len(ahead) and len(records[ahead[head][0]]) > ahead[head][1]:
            ahead_bytes -= ahead[head][2]
            head += 1
        if ahead_bytes >= WINDOW:
            stop.wait(0.005)  # the run has the GIL most of the time: ask for it seldom
            continue
        c, pc, k0, k1 = chunks[i]
        i += 1
        if len(records[c]) > pc:  # the run is past it: it wrote those pages itself
            continue
        start = max(base + k0 * CHUNK, lo_addr) & ~4095
        end = min(base + k1 * CHUNK, hi_addr)
        if end <= start:
            continue
        if madvise(start, end - start, MADV_POPULATE_WRITE) != 0:
            return  # an older kernel (EINVAL), or no memory to be had now: the run faults them itself
        ahead.append((c, pc, end - start))
        ahead_bytes += end - start


@contextmanager
def populating(program, img: np.ndarray, records, chip):
    """While the body runs `program` on `img` (appending each core's records to `records`),
    a helper thread populates the chunks it will write, a window ahead."""
    if img.nbytes < MIN_IMAGE or not _libc_madvise():
        yield
        return
    chunks = written_chunks(program, chip)
    stop = threading.Event()
    t = threading.Thread(target=_helper, args=(img, chunks, records, stop), name="dse-prefault", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
