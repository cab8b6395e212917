"""`emulator.run` pauses the cyclic garbage collector while it executes and restores it:
enabled again after a run (also one that raises), left off if the caller had turned it off."""

from __future__ import annotations

import gc
import sys
import tomllib
from pathlib import Path

import pytest

from emulator import ExecutionError, Matmul, Mset, Mvin, Program, run
from emulator.chip import chip_from_dict

CONFIGS = Path(__file__).resolve().parents[1] / "chip_configs"


@pytest.fixture(scope="module")
def toy():
    with open(CONFIGS / "toy.toml", "rb") as f:
        return chip_from_dict(tomllib.load(f))


def test_the_collector_is_off_during_a_run_and_restored_after(toy, monkeypatch):
    seen = []
    emrun = sys.modules["emulator.run"]  # the package's `run` hides the module's name
    real = emrun.Machine.run

    def spy(self, boundary=None, cuts=None):
        seen.append(gc.isenabled())
        return real(self, boundary, cuts)

    monkeypatch.setattr(emrun.Machine, "run", spy)
    prog = Program([[Mset(0, 1), Mvin(0, 0, 4)]], dram_bytes=4096)
    assert gc.isenabled()
    run(prog, toy)
    assert seen == [False] and gc.isenabled()
    with pytest.raises(ExecutionError):  # bank 5 is not allocated
        run(Program([[Mset(0, 1), Matmul(0, 5, 0, 16, 16, 16)]], dram_bytes=4096), toy)
    assert gc.isenabled()
    gc.disable()
    try:
        run(prog, toy)
        assert not gc.isenabled()  # the caller's choice stands
    finally:
        gc.enable()
