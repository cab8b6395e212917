"""A big report builds its PNGs and its interactive area, energy and latency figures in a
forked child (`dse.report.aside`): the same report as built in process, a failure there one
clear error, an interruption leaves no process behind and no page written."""

import gc
import os
import signal
import time

import pandas as pd
import pytest

from dse.records import Store
from dse.report import aside, write_report
from dse.report import figures as figures_module
from dse.report import html as html_module
from dse.runner import run_sweep

from test_runner import write_spec

pytestmark = pytest.mark.skipif(not aside.can_fork(), reason="a report builds part of itself aside on Linux only")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    folder = tmp_path_factory.mktemp("aside")
    run_sweep(write_spec(folder, name="aside"), folder / "r.db", progress=False)
    return folder / "r.db"


@pytest.fixture
def forks(monkeypatch):
    """Every report built partly aside (however few its candidates); the children's pids."""
    pids = []
    fork = os.fork

    def recorded():
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(aside, "ASIDE_FROM", 0)
    monkeypatch.setattr(aside.os, "fork", recorded)
    return pids


def _gone(pid: int) -> bool:
    """Reaped (not a zombie waiting for its parent, not running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _files(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_report_built_aside_is_the_report_built_in_process(swept, tmp_path, monkeypatch, forks):
    monkeypatch.setattr(aside, "ASIDE_FROM", 10**9)
    with Store(swept) as store:
        here = write_report(store, "aside", tmp_path / "here")
    assert forks == []
    monkeypatch.setattr(aside, "ASIDE_FROM", 0)
    with Store(swept) as store:
        there = write_report(store, "aside", tmp_path / "there")
    assert len(forks) == 1 and _gone(forks[0])
    assert gc.get_freeze_count() == 0  # what it froze for the child's time, thawed
    mine, theirs = _files(tmp_path / "here"), _files(tmp_path / "there")
    # The same images (drawn by the child, byte for byte) and pages (the PPA figures' part of
    # the HTML built by the child too).
    assert "aside_files/pareto.png" in mine and mine["aside_files/pareto.png"].startswith(b"\x89PNG")
    assert mine == theirs
    assert list(here.figures) == list(there.figures)
    for name in here.figures:
        pd.testing.assert_frame_equal(here.figures[name].data, there.figures[name].data)


def test_a_failure_aside_is_one_clear_error_and_writes_no_page(swept, tmp_path, monkeypatch, forks, cli):
    def broken(self):
        raise ValueError("no room for the legend")

    monkeypatch.setattr(figures_module.Figure, "png_bytes", broken)  # the child inherits it
    with Store(swept) as store, pytest.raises(aside.AsideFailed) as failed:
        write_report(store, "aside", tmp_path / "out")
    assert str(failed.value) == "building the report's pareto.png failed: ValueError: no room for the legend"
    # Where it failed, from the child's traceback, kept with the error (the CLI's traceback file).
    assert "in broken" in failed.value.__notes__[0] and "no room for the legend" in failed.value.__notes__[0]
    assert not (tmp_path / "out" / "aside.html").exists()
    code, out, err = cli("report", "aside", "--db", swept, "--out", tmp_path / "cli")
    assert code == 1 and out == ""
    assert err.startswith("dse: internal error: AsideFailed: building the report's pareto.png failed: "
                          "ValueError: no room for the legend; full traceback in ")
    assert len(forks) == 2 and all(_gone(pid) for pid in forks)


def test_no_process_to_be_had_builds_it_all_here(swept, tmp_path, monkeypatch, forks):
    def refused():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(aside.os, "fork", refused)
    with Store(swept) as store:
        report = write_report(store, "aside", tmp_path / "out")
    assert (tmp_path / "out" / "aside_files" / "pareto.png").read_bytes().startswith(b"\x89PNG")
    assert 'id="ppa-latency-energy"' in report.path.read_text() and gc.get_freeze_count() == 0


def test_a_child_that_dies_is_named_with_how_it_ended(swept, tmp_path, monkeypatch, forks):
    monkeypatch.setattr(figures_module.Figure, "png_bytes", lambda self: os._exit(7))
    with Store(swept) as store, pytest.raises(aside.AsideFailed,
                                              match=r"^the process building part of the report ended without it "
                                                    r"\(exit code 7\)$"):
        write_report(store, "aside", tmp_path / "out")
    assert not (tmp_path / "out" / "aside.html").exists()
    assert len(forks) == 1 and _gone(forks[0])


def test_an_interrupted_report_stops_its_child(swept, tmp_path, monkeypatch, forks):
    def slow(self):
        time.sleep(60)  # still drawing when the report is interrupted
        os._exit(0)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    ended = []
    waitpid = os.waitpid

    def recorded(pid, options):
        ended.append(waitpid(pid, options))
        return ended[-1]

    monkeypatch.setattr(figures_module.Figure, "png_bytes", slow)
    monkeypatch.setattr(html_module, "experiment_figures", interrupted)  # after the child has started
    monkeypatch.setattr(aside.os, "waitpid", recorded)
    with Store(swept) as store, pytest.raises(KeyboardInterrupt):
        write_report(store, "aside", tmp_path / "out")
    # Stopped (killed), not waited for, and reaped.
    assert len(forks) == 1 and _gone(forks[0])
    assert [(pid, os.waitstatus_to_exitcode(status)) for pid, status in ended] == [(forks[0], -signal.SIGKILL)]
    assert not (tmp_path / "out" / "aside.html").exists()
