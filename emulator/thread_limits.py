"""Thread-count limits on the process's native pools (threadpoolctl's), without its library
lookup on every call.

threadpoolctl finds the pools by walking the loaded libraries (dl_iterate_phdr), and it runs
Python inside that walk, in the dynamic loader's lock. Done on one thread while another
imports a compiled module (dlopen, which keeps the GIL), each waits for what the other holds,
for ever: the boundary checks' reference thread, limiting its own pool, hung this way against
the emulator's first load of its compiled core (about one run in six of
tests/test_graph_cache.py). So the libraries are looked up once, and again only when a pool's
library has been loaded since (seen in /proc/self/maps, which takes no lock); setting a limit
is then plain calls into the libraries, safe on any thread."""

from __future__ import annotations

import threading

from threadpoolctl import ThreadpoolController

# What threadpoolctl's pools' library files are named after (BLAS and OpenMP runtimes).
_POOLS = ("openblas", "blis", "mkl", "gomp", "iomp", "libomp", "flexiblas", "vcomp")
_lock = threading.Lock()
_found: list = []  # [the pools' libraries when looked up, the controller], once looked up


def _pool_libraries() -> frozenset[str] | None:
    """The mapped library files named like a pool's (None without /proc: looked up once)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.rsplit(None, 1)[-1] for line in maps if ".so" in line}
    except OSError:
        return None
    return frozenset(p for p in paths if any(name in p.rsplit("/", 1)[-1] for name in _POOLS))


def controller() -> ThreadpoolController:
    """threadpoolctl's view of the pools loaded, looked up again only when one was loaded since.
    Call it first on a thread that no other thread's imports can be waiting on (the one that
    starts the others)."""
    with _lock:
        libraries = _pool_libraries()
        if not _found or (libraries is not None and libraries != _found[0]):
            _found[:] = [libraries, ThreadpoolController()]
        return _found[1]


def limited(limits: int, user_api: str | None = None):
    """`threadpoolctl.threadpool_limits(limits, user_api=user_api)` on the pools as last looked
    up: a context manager, the counts restored when it exits (OpenMP's: the calling thread's)."""
    return controller().limit(limits=limits, user_api=user_api)
