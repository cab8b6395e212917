"""The memory allocator of a whole model's run (`dse emulate` or `dse recipe chain` of a chain,
layer after layer): jemalloc, keeping the memory a phase frees for the next, when the
machine has it.

Why. A layer of a large model allocates and frees gigabytes phase after phase (its weights,
each forward's activations, the integer check's products, the emulator's operands). glibc
hands every block over 32 MB back to the kernel when it is freed, and the next phase faults
fresh pages in again. On a virtual machine whose balloon reports free memory to its host
(`bench/bench_refault.py`: 2 s of kernel time a GB for pages free more than about 2 s) that
was a third of a Llama-3-8B-shaped layer's CPU. jemalloc with its decay off
(`MALLOC_CONF`) keeps freed pages in the process and serves the next phase from them: a
reused layer of the whole model 33.4 + 41.1 s -> 13.4 + 24.8 s (frontend + emulation,
`bench/bench_llama_phases.py --seq 2048 --layers 2`, then the same with
``LD_PRELOAD=libjemalloc.so.2 MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1``: the bench
runs in its own process, not through the CLI; same machine and load). A single layer gains
nothing (`bench/bench_llama_layer.py`: its cold run 0.95x, further runs 1.0x) and peaks
higher (4.06 GB against 3.91, past its 4 GB target): it keeps the system's malloc.

How. jemalloc replaces malloc only when loaded before the process starts, so the command
execs itself once more with ``LD_PRELOAD`` set (`exec_with_jemalloc`, once it knows it runs a
chain and before torch loads; same pid, same arguments). The pages it keeps are given back
before a stage's emulator run only when they are more than half the memory available
(`give_back_freed`): given back every time, they made the gain vanish. So the model peaks at
6.46 GB against 4.28 under the system's malloc (its target 8 GB); ``DSE_ALLOCATOR=system``
is the smaller footprint.

`DSE_ALLOCATOR`: ``jemalloc`` (the default; the system's malloc where jemalloc is not
installed: ``apt install libjemalloc2``) or ``system``. The allocator a run used is in its
provenance and `dse emulate`'s JSON (`in_use`): host times under one and the other are not
alike. A library user's process (a notebook) keeps the allocator it started with.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import signal
import sys

from .errors import InputError

ENV = "DSE_ALLOCATOR"
CHOICES = ("jemalloc", "system")
JEMALLOC = "libjemalloc.so.2"
# Freed pages kept until given back (decay off); a user's own MALLOC_CONF is left as it is.
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
_EXECED = "DSE_ALLOCATOR_EXECED"  # set in the exec'd process: never twice
_CLI_PROCESS = False  # the CLI runs as this process (`cli_process`): it may exec itself
_ARENAS_ALL = 4096  # jemalloc's MALLCTL_ARENAS_ALL: "arena.4096.purge" purges every arena
# Kept freed memory is given back before an emulator run once it is more than this share of
# the memory the machine has available (`give_back_freed`).
GIVE_BACK_SHARE = 0.5


def chosen(env=os.environ) -> str:
    """`DSE_ALLOCATOR`'s value (default jemalloc); an InputError names a bad one."""
    value = env.get(ENV, "jemalloc") or "jemalloc"
    if value not in CHOICES:
        raise InputError("(environment)", ENV, value, " or ".join(CHOICES))
    return value


def _installed() -> str | None:
    """The machine's jemalloc as the loader finds it ("libjemalloc.so.2"), None without one."""
    return ctypes.util.find_library("jemalloc")


def exec_args(env=os.environ) -> tuple[str, list[str], dict] | None:
    """(executable, argv, environment) this process should exec itself with to run under
    jemalloc; None when it runs as it is (not the CLI's own process - a caller of
    ``dse.cli.main(argv)``, a test or a notebook, is never replaced -, jemalloc loaded already
    or not installed, ``DSE_ALLOCATOR=system``, or exec'd once already)."""
    if not _CLI_PROCESS or env.get(_EXECED) or chosen(env) != "jemalloc":
        return None
    if not sys.platform.startswith("linux") or in_use().startswith("jemalloc"):
        return None
    path = _installed()
    if path is None:
        return None
    preload = " ".join(filter(None, [path, env.get("LD_PRELOAD", "")]))
    new_env = {**env, "LD_PRELOAD": preload, _EXECED: "1"}
    new_env.setdefault("MALLOC_CONF", JEMALLOC_CONF)
    return sys.executable, list(sys.orig_argv), new_env


def exec_with_jemalloc() -> None:
    """Exec this process (the CLI's, before torch loads) again under jemalloc (`exec_args`);
    returns when it runs as it is. An exec that fails leaves the process running as it was.

    A Ctrl-C must not land between the exec and the new interpreter's own SIGINT handler
    (the default action would kill it, not exit 130): SIGINT is blocked across the exec (a
    mask outlives it) and the new process unblocks it once it can handle it
    (`cli_process`), a pending one then raised there."""
    args = exec_args()
    if args is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    args[2][_EXECED] = "sigint-blocked" if signal.SIGINT in before else "1"
    try:
        os.execve(*args)
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def cli_process() -> None:
    """Told by the CLI when it runs as the process itself (`dse ...`, ``python -m dse``): only
    then may it exec itself. In a process `exec_with_jemalloc` started, SIGINT is unblocked
    again (unless the process before the exec had it blocked), a Ctrl-C that came in between
    delivered now."""
    global _CLI_PROCESS
    _CLI_PROCESS = True
    if os.environ.get(_EXECED) == "1":
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@functools.cache
def _mallctl():
    try:
        return ctypes.CDLL(None).mallctl
    except AttributeError:  # glibc's malloc: no mallctl in the process
        return None


@functools.cache
def in_use() -> str:
    """The process's allocator and its version ("jemalloc 5.3.0-0-g...", "glibc 2.36")."""
    mallctl = _mallctl()
    if mallctl is None:
        lib, version = platform.libc_ver()
        return f"{lib or 'system'} {version}".strip()
    version = ctypes.c_char_p()
    size = ctypes.c_size_t(ctypes.sizeof(version))
    if mallctl(b"version", ctypes.byref(version), ctypes.byref(size), None, ctypes.c_size_t(0)) != 0:
        return "jemalloc"
    return f"jemalloc {version.value.decode()}"


def kept_bytes() -> int | None:
    """What jemalloc keeps freed (dirty pages of every arena), in bytes; None under another
    allocator (or a jemalloc built without statistics)."""
    mallctl = _mallctl()
    if mallctl is None:
        return None
    epoch = ctypes.c_uint64(1)  # the statistics are a snapshot: refreshed by writing the epoch
    mallctl(b"epoch", None, None, ctypes.byref(epoch), ctypes.c_size_t(ctypes.sizeof(epoch)))
    pages, size = ctypes.c_size_t(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_size_t))
    if mallctl(f"stats.arenas.{_ARENAS_ALL}.pdirty".encode(), ctypes.byref(pages), ctypes.byref(size), None,
               ctypes.c_size_t(0)) != 0:
        return None
    return pages.value * os.sysconf("SC_PAGE_SIZE")


def available_bytes(meminfo: str | None = None) -> int | None:
    """The memory the machine has available (/proc/meminfo's MemAvailable), None unknown."""
    try:
        text = meminfo if meminfo is not None else open("/proc/meminfo").read()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def give_back_freed(above: int | None = None) -> bool:
    """Hand the pages jemalloc keeps back to the kernel when they are more than `above` bytes
    (default: `GIVE_BACK_SHARE` of the memory available), before a phase whose own peak would
    stack on them; whether it did. Nothing under another allocator.

    Kept, they serve the next layer: given back before every stage's emulator run, the whole
    model's layer took 50.4 s against 27.2 s kept (its peak 4.48 GB against 6.46,
    `bench/bench_llama_model.py`, one run), as slow as the system's malloc. So they are given
    back only where the machine is short of memory."""
    mallctl = _mallctl()
    if mallctl is None:
        return False
    if above is None:
        available = available_bytes()
        above = int(available * GIVE_BACK_SHARE) if available is not None else 0
    kept = kept_bytes()
    if kept is not None and kept <= above:
        return False
    mallctl(f"arena.{_ARENAS_ALL}.purge".encode(), None, None, None, ctypes.c_size_t(0))
    return True


__all__ = ["CHOICES", "ENV", "available_bytes", "chosen", "exec_args", "exec_with_jemalloc", "give_back_freed", "in_use",
           "kept_bytes", "cli_process"]
