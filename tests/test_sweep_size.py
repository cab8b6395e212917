"""A sweep's size before it starts (dse.runner.size): candidates counted without building
them, refused above `[search] max_candidates` with the estimate on one line (exit 2,
nothing written) unless `dse sweep --yes-large`."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dse.errors import InputError
from dse.records import Store
from dse.runner import load_spec, run_sweep
from dse.runner.size import check_size, sweep_size
from dse.runner.space import Knob

DSE = Path(sys.executable).with_name("dse")

# 10^4 worker counts x 10^3 bank counts: 10^7 grid points (the workers vary slowest, so the
# first batches are feasible candidates on goban's 4 cores).
BIG = """
[experiment]
name = "big"
hypothesis = "A 10^7-point grid is refused before it starts"

[workload]
recipe = "gemm"
params = {{ m = 16, n = 16, k = 16 }}

[baseline]
chip = "goban"
mapping = {{ workers = 1 }}

[[space]]
name = "workers"
target = "mapping.workers"
low = 1
high = 10000

[[space]]
name = "banks"
target = "chip.banks.count"
low = 12
high = 1011

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "{sampler}"
{extra}
"""


# Runs argv, prints its peak RSS (kB) last and exits with its code.
PEAK_RSS = ("import os, subprocess, sys; p = subprocess.Popen(sys.argv[1:]); _, status, use = os.wait4(p.pid, 0); "
            "print(use.ru_maxrss); sys.exit(os.waitstatus_to_exitcode(status))")


def big_spec(tmp_path: Path, sampler: str = "grid", extra: str = "") -> Path:
    path = tmp_path / "big.toml"
    path.write_text(BIG.format(sampler=sampler, extra=extra))
    return path


@pytest.mark.parametrize("knob", [
    dict(values=["a", "b", "c"]),
    dict(low=1, high=10),
    dict(low=3, high=20, step=4),
    dict(low=1, high=100, log=True, type="int"),
    dict(low=0.5, high=2.0, step=0.25),
    dict(low=0.1, high=1.0, grid_points=7),
    dict(low=1e-3, high=1.0, log=True, grid_points=4),
])
def test_a_knobs_grid_is_counted_as_listed(knob):
    k = Knob(name="x", target="chip.x", **knob)
    assert k.grid_count() == len(k.grid_values())


def test_a_huge_integer_knob_is_counted_not_listed():
    # This thread's CPU time, not the wall clock: a loaded machine may leave it waiting longer
    # than the count takes.
    started = time.thread_time()
    assert Knob(name="x", target="chip.x", low=0, high=10 ** 12).grid_count() == 10 ** 12 + 1
    assert time.thread_time() - started < 0.01
    assert Knob(name="x", target="chip.x", low=0.0, high=1.0).grid_count() is None  # no grid


def test_the_estimate_is_the_stated_constants_times_the_count(tmp_path):
    spec = load_spec(big_spec(tmp_path))
    size = sweep_size(spec)
    assert size.candidates == 10 ** 7 + 1  # the grid and the baseline
    assert size.seconds == pytest.approx((10 ** 7 + 1) * 0.0015)  # 4.2 h
    assert size.store_bytes == (10 ** 7 + 1) * 6100  # 61 GB
    with pytest.raises(InputError) as refused:
        check_size(spec)
    assert "10000001 candidates" in str(refused.value) and "~4.2 h" in str(refused.value)
    assert "~61.0 GB" in str(refused.value) and "--yes-large" in str(refused.value)
    assert check_size(spec, yes_large=True) == size

    # A sampler's budget counts as its trials; the limit is the spec's to raise.
    sampled = load_spec(big_spec(tmp_path, "tpe", "trials = 200000"))
    assert sweep_size(sampled).candidates == 200_001
    with pytest.raises(InputError, match="200001 candidates"):
        check_size(sampled)
    raised = load_spec(big_spec(tmp_path, "tpe", "trials = 200000\nmax_candidates = 300000"))
    assert check_size(raised).candidates == 200_001


def test_a_ten_million_point_grid_is_refused_at_once_and_let_past_with_the_flag(tmp_path):
    spec, db = big_spec(tmp_path, extra="wall_seconds = 1"), tmp_path / "r.db"
    started = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Measured by a small Python parent: a child's peak RSS counts the memory of the process
    # that forked it until its exec (a pytest worker's hundreds of MB).
    process = subprocess.run([sys.executable, "-c", PEAK_RSS, str(DSE), "sweep", str(spec), "--db", str(db),
                              "--no-progress"], capture_output=True, text=True)
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)  # the parent's and its child's CPU time
    seconds = (ended.ru_utime - started.ru_utime) + (ended.ru_stime - started.ru_stime)
    err, peak_kb = process.stderr, int(process.stdout.split()[-1])
    assert process.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "10000001 candidates" in lines[0] and "--yes-large" in lines[0], err
    assert "Traceback" not in err and not db.exists()  # nothing written
    # counted, not built (building ten million candidates takes hours): CPU time, not the wall
    # clock, which a loaded machine stretches (26 s once, under a full suite and two busy loops)
    assert seconds < 60, seconds
    # KB: 50 MB, or 250 MB when checking the spec captures its recipe (torch); a listed grid is gigabytes
    assert peak_kb < 1024 * 1024, peak_kb

    # With the flag the size is no longer the refusal: the next check is (a --db it cannot use).
    past = subprocess.run([str(DSE), "sweep", str(spec), "--db", "nosuch://x", "--yes-large"],
                          capture_output=True, text=True, timeout=120)
    assert past.returncode == 2 and "field '--db'" in past.stderr and "candidates" not in past.stderr, past.stderr


def test_a_ten_million_point_grid_asked_for_starts(tmp_path):
    # In this process (its recipe captured already by the estimate's test): the wall clock
    # stops the sweep after its first batches.
    result = run_sweep(big_spec(tmp_path, extra="wall_seconds = 1"), tmp_path / "r.db", progress=False,
                       yes_large=True)
    assert result.stopped_early == "wall time of 1.0 s reached"
    assert 1 < result.evaluated < 10 ** 5
    with Store(tmp_path / "r.db") as store:
        assert len(store.candidates(result.experiment_id)) == result.evaluated
