"""The benches' timers: a callable's wall and CPU seconds over several runs, and a child
process's. Each bench prints medians of these (the machines are shared and noisy)."""

from __future__ import annotations

import resource
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Runs:
    """The wall and CPU seconds of each run of a callable, and what its last run returned."""

    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    last: Any = None


def runs_of(fn: Callable[[], Any], runs: int) -> Runs:
    """`fn()` run `runs` times: each run's wall and CPU (this process's) seconds."""
    out = Runs()
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        out.last = fn()
        out.walls.append(time.perf_counter() - wall)
        out.cpus.append(time.process_time() - cpu)
    return out


def children_cpu() -> float:
    """The CPU seconds of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_seconds(argv: list[str], env: dict | None = None, cwd: Path | str | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one command run to its end (its output dropped; a failure raises)."""
    start, cpu = time.perf_counter(), children_cpu()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    return time.perf_counter() - start, children_cpu() - cpu
