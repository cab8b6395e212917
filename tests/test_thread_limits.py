"""Thread-count limits on the native pools (emulator.thread_limits): the libraries looked up
once, on the thread that starts the others, never on the boundary checks' reference thread
(a lookup there deadlocked against an import on the main thread), and again only when a
pool's library was loaded since."""

from __future__ import annotations

import json
import threading

import threadpoolctl
import torch
from test_frontend import user_recipe

from emulator import thread_limits


def test_the_reference_thread_looks_no_library_up(tmp_path, graph_cache_dir, monkeypatch, capsys):
    from dse.cli import main

    looked_up_on, drew_on = [], []
    real_init = threadpoolctl.ThreadpoolController.__init__

    def init(self, *args, **kwargs):
        looked_up_on.append(threading.current_thread().name)
        real_init(self, *args, **kwargs)

    def spy_limit(self, *args, **kwargs):
        drew_on.append(threading.current_thread().name)
        return real_limit(self, *args, **kwargs)

    real_limit = threadpoolctl.ThreadpoolController.limit
    monkeypatch.setattr(threadpoolctl.ThreadpoolController, "__init__", init)
    monkeypatch.setattr(threadpoolctl.ThreadpoolController, "limit", spy_limit)
    monkeypatch.setattr(thread_limits, "_found", [])  # looked up afresh in this run
    folder = user_recipe(tmp_path / "mine")
    assert main(["emulate", "--chip", "toy", "--recipe", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["numerics"]["passed"]
    assert "dse-reference" in drew_on  # the reference was drawn on its thread, limited there,
    assert set(looked_up_on) == {threading.main_thread().name}  # and the libraries looked up on the main one


def test_the_pools_are_looked_up_again_only_when_one_was_loaded_since(monkeypatch):
    loaded = [frozenset({"/lib/libgomp.so.1"})]
    monkeypatch.setattr(thread_limits, "_pool_libraries", lambda: loaded[0])
    monkeypatch.setattr(thread_limits, "_found", [])
    first = thread_limits.controller()
    assert thread_limits.controller() is first
    loaded[0] = loaded[0] | {"/lib/libopenblas.so.0"}
    second = thread_limits.controller()
    assert second is not first and thread_limits.controller() is second


def test_a_limit_holds_inside_and_the_count_is_restored():
    was = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with thread_limits.limited(1, user_api="openmp"):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(was)
