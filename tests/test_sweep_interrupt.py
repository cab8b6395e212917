"""A sweep cut in the middle of an analytical batch: that batch is not recorded at all
(nothing half-written, nothing left running), every batch evaluated before it is recorded
with its runs finished, and the rerun evaluates the unrecorded points again. The grid,
random and Optuna (TPE) samplers' resume paths alike; a Ctrl-C and a killed driver alike."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys

import pytest

import dse.runner.execution as execution
from dse.records import Store
from dse.runner import run_sweep
from test_runner import write_spec

BANKS = "[4, 8, 12, 16, 20, 24]"  # x 3 workers: an 18-point grid (the baseline, 20 banks x 1 worker, among them)
BATCH = "batch = 4\n"
FINAL = {"ok", "infeasible"}


def recorded(db, name: str):
    with Store(db) as store:
        return store.candidates(name), store.runs(name), store.metric_table(name, "analytical")


def cut_at(monkeypatch, call: int) -> list[str]:
    """The model's `call`-th batch raises KeyboardInterrupt (a Ctrl-C at once) as it starts:
    the hashes of the candidates it held, filled in then."""
    real, calls, cut = execution._analytical_batch, [], []

    def interrupted(graph, cands, *rest):
        calls.append(1)
        if len(calls) == call:
            cut.extend(c.hash for c in cands)
            raise KeyboardInterrupt
        return real(graph, cands, *rest)

    monkeypatch.setattr(execution, "_analytical_batch", interrupted)
    return cut



def test_the_collector_pauses_while_the_driver_evaluates_a_batch_and_is_as_it_was_after(tmp_path, monkeypatch):
    # (`sweep._collection_paused`: a batch's objects live until it is recorded)
    seen = []
    real = execution._analytical_batch

    def watched(graph, cands, *rest):
        seen.append((gc.isenabled(), len(cands)))
        return real(graph, cands, *rest)

    monkeypatch.setattr(execution, "_analytical_batch", watched)
    spec = write_spec(tmp_path, name="paused", banks=BANKS, sampler="grid", trials=10, extra=BATCH)
    assert run_sweep(spec, tmp_path / "r.db", progress=False).evaluated == 18
    # the baseline with the first batch of 4 (evaluated ahead), then 4 + 4 + 4 + 1
    assert seen == [(False, 5), (False, 4), (False, 4), (False, 4), (False, 1)] and gc.isenabled()
    cut_at(monkeypatch, 2)  # a batch cut by Ctrl-C: the collector back on all the same
    with pytest.raises(KeyboardInterrupt):
        run_sweep(write_spec(tmp_path, name="cut", banks=BANKS, sampler="grid", trials=10, extra=BATCH),
                  tmp_path / "cut.db", progress=False)
    assert gc.isenabled()
    gc.disable()  # a caller's own choice stands
    try:
        run_sweep(write_spec(tmp_path, name="off", banks=BANKS, sampler="grid", trials=10, extra=BATCH),
                  tmp_path / "off.db", progress=False)
        assert not gc.isenabled()
    finally:
        gc.enable()

def test_what_a_batch_leaves_alive_is_frozen_until_the_sweep_ends_and_a_callers_freeze_is_kept(tmp_path, monkeypatch):
    """After each batch the sweep freezes what the batch left alive (its own freeze, undone
    when it ends): no young pass scans it again. Cyclic garbage a batch made is collected
    once the sweep has ended; a heap the caller froze stays as the caller left it."""
    import weakref

    class Node:
        pass

    counts, cycles = [], []
    real = execution._analytical_batch

    def watched(graph, cands, *rest):
        counts.append(gc.get_freeze_count())
        node = Node()
        node.me = node  # cyclic garbage once this call returns
        cycles.append(weakref.ref(node))
        return real(graph, cands, *rest)

    monkeypatch.setattr(execution, "_analytical_batch", watched)
    before = gc.get_freeze_count()
    run_sweep(write_spec(tmp_path, name="frozen", banks=BANKS, sampler="grid", trials=10, extra=BATCH),
              tmp_path / "r.db", progress=False)
    assert len(counts) == 5 and counts == sorted(counts) and counts[-1] > counts[0] > before
    assert gc.get_freeze_count() == before
    gc.collect()
    assert all(ref() is None for ref in cycles)
    counts.clear()
    gc.freeze()  # the caller's own freeze: the sweep freezes nothing more, and unfreezes nothing
    try:
        mine = gc.get_freeze_count()
        run_sweep(write_spec(tmp_path, name="theirs", banks=BANKS, sampler="grid", trials=10, extra=BATCH),
                  tmp_path / "theirs.db", progress=False)
        # (frozen objects freed by their last reference leave the count: it only falls)
        assert len(counts) == 5 and max(counts) <= mine and 0 < gc.get_freeze_count() <= mine
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("sampler,trials", [("grid", 10), ("random", 12), ("tpe", 12)])
def test_a_batch_cut_by_an_interrupt_is_not_recorded_and_the_rerun_evaluates_it(tmp_path, monkeypatch, sampler,
                                                                                  trials):
    name, db = f"cut-{sampler}", tmp_path / "r.db"
    spec = write_spec(tmp_path, name=name, banks=BANKS, sampler=sampler, trials=trials, extra=BATCH)
    cut = cut_at(monkeypatch, 2)  # the baseline's call with the first sampled batch, then this one
    with pytest.raises(KeyboardInterrupt) as stop:
        run_sweep(spec, db, progress=False)
    monkeypatch.undo()
    cands, runs, _ = recorded(db, name)
    assert stop.value.recorded == (len(cands), len(cands))  # what `dse sweep`'s line says: this run's, in all
    # The baseline and one batch, each candidate with one run, finished; of the cut batch nothing.
    assert cut and 2 <= len(cands) <= 5 and len(runs) == len(cands), runs[["status", "error"]]
    assert set(runs["status"]) <= FINAL and runs["finished_at"].notna().all()
    assert not set(cut) & set(cands["hash"])
    first = len(cands)

    again = run_sweep(spec, db, progress=False)
    cands, runs, table = recorded(db, name)
    assert again.resumed == first and again.evaluated == len(cands) - first
    assert cands["hash"].is_unique and len(runs) == len(cands) and set(runs["status"]) <= FINAL
    if sampler == "grid":  # every point, each once, with the figures of a sweep never cut
        whole = run_sweep(write_spec(tmp_path, name="whole", banks=BANKS, sampler=sampler, trials=trials,
                                     extra=BATCH), tmp_path / "whole.db", progress=False, reuse=False)
        other, _, other_table = recorded(tmp_path / "whole.db", "whole")
        assert whole.evaluated == len(cands) == 18 and set(other["hash"]) == set(cands["hash"])
        figures = lambda c, t: dict(zip(c.set_index("id").loc[t["candidate_id"], "hash"],  # noqa: E731
                                        t["latency_cycles"].fillna(-1)))
        assert figures(cands, table) == figures(other, other_table)
    else:  # the trial budget, met
        assert len(cands) == trials + 1
    if sampler != "tpe":  # the same draws again (TPE's study, rebuilt, may propose others)
        assert set(cut) <= set(cands["hash"])


KILLED = """
import os, signal, sys
import dse.runner.execution as execution
from dse.runner import run_sweep
real, calls = execution._analytical_batch, []
def killed(graph, cands, *rest):
    calls.append(1)
    if len(calls) == 2:  # the baseline's call with the first batch, then this one
        os.kill(os.getpid(), signal.SIGKILL)
    return real(graph, cands, *rest)
execution._analytical_batch = killed
run_sweep(sys.argv[1], sys.argv[2], progress=False)
"""


def test_a_driver_killed_mid_batch_leaves_the_batches_before_it_recorded_and_nothing_running(tmp_path):
    name, db = "killed", tmp_path / "r.db"
    spec = write_spec(tmp_path, name=name, banks=BANKS, sampler="grid", extra=BATCH)
    done = subprocess.run([sys.executable, "-c", KILLED, str(spec), str(db)], capture_output=True, text=True,
                          env={**os.environ, "DSE_EVIDENCE_DIR": str(tmp_path / "evidence")}, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr
    cands, runs, _ = recorded(db, name)
    assert 2 <= len(cands) <= 5 and len(runs) == len(cands) and set(runs["status"]) <= FINAL
    again = run_sweep(spec, db, progress=False)
    assert again.resumed == len(cands) and again.evaluated == 18 - len(cands)
    cands, runs, _ = recorded(db, name)
    assert len(cands) == len(runs) == 18 and set(runs["status"]) <= FINAL
