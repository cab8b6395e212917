"""Where and with what a run executed: host, git state of the dse checkout, versions, command.

Every lookup tolerates absence (no git, not a checkout, a package not installed) and
answers None rather than failing the run it describes. The process identity (pid and
start time) lets a later open tell a run whose process died from one still at work.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import dse
from dse import allocator

TRACKED_PACKAGES = ("numpy", "pandas", "torch", "sqlalchemy", "optuna", "dse")


@dataclass(frozen=True)
class Provenance:
    host: str | None
    git_commit: str | None
    git_dirty: bool | None
    versions: dict[str, str | None]
    command: str
    pid: int
    pid_start: str | None


def collect(command: str | None = None) -> Provenance:
    commit, dirty = git_state()
    pid = os.getpid()
    return Provenance(
        host=hostname(),
        git_commit=commit,
        git_dirty=dirty,
        versions=package_versions(),
        command=" ".join(sys.argv) if command is None else command,
        pid=pid,
        pid_start=_own_start(pid),
    )


@functools.lru_cache(maxsize=4)
def _own_start(pid: int) -> str | None:
    # A live process's start time never changes: read /proc once per process (keyed by
    # pid, so a forked child reads its own), not once per recorded batch.
    return process_start(pid)


# ---- is the process that wrote a "running" row still alive? ---------------------------


def process_start(pid: int) -> str | None:
    """What tells process `pid` apart from a later process given the same pid.

    On Linux "<boot id>:<start time in clock ticks since boot>" (from /proc); None
    where that cannot be read, or for a process that has ended (a zombie included).
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):  # zombie or dead: it will write no more
        return None
    return f"{_boot_id()}:{fields[19]}"


def process_alive(pid: int, pid_start: str | None) -> bool:
    """Whether the process recorded as (pid, pid_start) on this host still runs."""
    if pid_start is not None and Path("/proc/self/stat").exists():
        return process_start(pid) == pid_start
    # No process identity recorded or readable: the pid alone (may be fooled by reuse).
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


@functools.cache
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "-"


# The host name this process records as its own, when set (default: the machine's name).
# Two containers that share a host name but not a process table must differ here, or each
# would judge the other's processes by pids it cannot see.
HOST_ENV = "DSE_HOST"


def hostname() -> str | None:
    if os.environ.get(HOST_ENV):
        return os.environ[HOST_ENV]
    try:
        return socket.gethostname()
    except OSError:
        return None


# Cached per process: the code a process runs is the code it imported at start, so the
# first answer is the right one, and a sweep need not fork git for every run.
@functools.cache
def git_state() -> tuple[str | None, bool | None]:
    """(HEAD commit, dirty?) of the git checkout holding the dse package."""
    checkout = Path(__file__).resolve().parents[2]
    status = _git(checkout, "status", "--porcelain")
    if status is None:
        return None, None
    head = _git(checkout, "rev-parse", "HEAD")  # None in a repo with no commits yet
    return (head.strip() if head else None), bool(status.strip())


@functools.cache
def package_versions() -> dict[str, str | None]:
    # the allocator's too: a host time under jemalloc and one under glibc are not alike
    versions: dict[str, str | None] = {"python": platform.python_version(), "allocator": allocator.in_use()}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = _source_tree_version() if name == "dse" else None
    return versions


def _source_tree_version() -> str | None:
    # dse run from a checkout without `pip install` has no distribution metadata.
    try:
        return dse.__version__
    except (ImportError, AttributeError):
        return None


def _git(cwd: Path, *args: str) -> str | None:
    # GIT_OPTIONAL_LOCKS=0: `git status` must not take index.lock, which would race
    # between parallel workers (and with the user's own git commands).
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=10,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout
