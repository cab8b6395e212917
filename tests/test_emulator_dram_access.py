"""The one static walk over a program's DRAM accesses (`emulator.dram_access`), against what
the machine really writes: on generated programs (private banks of 1 and 4 columns, shared
banks, strided and contiguous transfers, barriers), every byte a run changes by the end of
an epoch lies in a write the walk puts in that epoch or an earlier one."""

from __future__ import annotations

import numpy as np
import pytest

from emulator.machine import Machine
from emulator.dram_access import dram_accesses
from test_timing_fast_paths import chip, random_program


def _rows(access) -> list[tuple[int, int]]:
    _, _, _, _, lo, hi, stride, width = access
    return [(a, min(a + width, hi)) for a in range(lo, hi, stride)]


@pytest.mark.parametrize("name, cores", [("goban", 4), ("goban", 1), ("poly", 5), ("toy", 1)])
@pytest.mark.parametrize("seed", range(3))
def test_every_byte_a_run_writes_is_in_a_write_of_its_epoch_or_before(name, cores, seed):
    c = chip(name)
    prog = random_program(np.random.default_rng(seed), c, cores, barriers=2 if cores > 1 else 0)
    image = prog.image()
    image[:] = np.random.default_rng(100 + seed).integers(0, 256, image.size, dtype=np.uint8)
    start = image.copy()
    accesses = dram_accesses(prog, c)
    assert accesses and any(a[3] for a in accesses) and any(not a[3] for a in accesses)
    covered_by = []  # the bytes the walk says are written by the end of epoch e

    def boundary(e: int) -> None:
        covered = np.zeros(image.size, dtype=bool)
        for access in accesses:
            if access[3] and access[2] <= e:
                for a, b in _rows(access):
                    covered[a:b] = True
        changed = image != start
        covered_by.append((e, covered))
        assert not (changed & ~covered).any(), f"epoch {e}: bytes written outside the walk's writes"

    Machine(c, prog, image).run(boundary=boundary)
    assert [e for e, _ in covered_by] == list(range(len(covered_by)))
    # the walk is not vacuous: most of what it calls written really changed
    changed, covered = image != start, covered_by[-1][1]
    assert changed.sum() > 0.9 * covered.sum()
