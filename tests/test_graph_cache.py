"""The graph cache: a pipeline's result served from disk under its content identity, never
stale (the key covers the source), corrupt entries rebuilt, LRU eviction, atomic writes."""

from __future__ import annotations

import os
import threading

import pytest
from test_frontend import user_recipe

from dse.frontend import pipeline, run_pipeline
from dse.workload import cache


def entries(folder):
    return sorted(p for p in folder.glob("*.pkl"))


def test_a_second_run_is_served_from_the_cache(tmp_path, graph_cache_dir, monkeypatch):
    folder = user_recipe(tmp_path / "mine")
    first = run_pipeline(folder)
    assert first.passed and len(entries(graph_cache_dir)) == 1

    def no_capture(*args, **kwargs):
        raise AssertionError("captured again")

    monkeypatch.setattr(pipeline, "_run", no_capture)
    again = run_pipeline(folder, out_dir=tmp_path / "dumps")
    assert again.graph.dump() == first.graph.dump() and [s.to_dict() for s in again.stages] == [
        s.to_dict() for s in first.stages]
    assert sorted(p.name for p in (tmp_path / "dumps").iterdir()) == [s.dump for s in first.stages]
    with pytest.raises(AssertionError, match="captured again"):  # other params: another key
        run_pipeline(folder, {"rows": 5})


def test_a_changed_source_or_step_is_another_key(tmp_path, graph_cache_dir):
    folder = user_recipe(tmp_path / "mine")
    before = run_pipeline(folder)
    model = folder / "model.py"
    model.write_text(model.read_text().replace("nn.Linear(8, 4)", "nn.Linear(8, 6)"))
    after = run_pipeline(folder)
    assert after.graph.tensors[after.graph.outputs[0]].shape[-1] == 6 != before.graph.tensors[
        before.graph.outputs[0]].shape[-1]
    (folder / "steps.toml").write_text('[[step]]\nname = "quantize"\n')
    stepped = run_pipeline(folder)
    assert [s.name for s in stepped.stages] == ["import", "quantize"]
    assert len(entries(graph_cache_dir)) == 3


def test_a_corrupt_entry_is_ignored_and_rebuilt(tmp_path, graph_cache_dir):
    folder = user_recipe(tmp_path / "mine")
    first = run_pipeline(folder)
    (entry,) = entries(graph_cache_dir)
    entry.write_bytes(b"\x80\x05 not a pickle")
    again = run_pipeline(folder)
    assert again.passed and again.graph.dump() == first.graph.dump()
    assert isinstance(cache.load(entry.stem), pipeline.PipelineResult)  # rewritten whole


def test_least_recently_used_entries_are_evicted_past_the_limit(graph_cache_dir, monkeypatch):
    monkeypatch.setenv(cache.MAX_BYTES_ENV, "2500")
    for i, key in enumerate(("a", "b", "c")):
        assert cache.store(key, b"x" * 1000) is not None
        os.utime(graph_cache_dir / f"{key}.pkl", (1000 + i, 1000 + i))
    # the third store evicted the oldest ("a"); reading "b" makes "c" the least recent
    assert [p.stem for p in entries(graph_cache_dir)] == ["b", "c"]
    assert cache.load("b") == b"x" * 1000
    os.utime(graph_cache_dir / "c.pkl", (1, 1))
    cache.store("d", b"y" * 1000)
    assert [p.stem for p in entries(graph_cache_dir)] == ["b", "d"]
    assert cache.store("huge", b"z" * 5000) is None and not (graph_cache_dir / "huge.pkl").exists()


def test_concurrent_writers_never_show_a_partial_entry(graph_cache_dir):
    values = [bytes([i]) * 200_000 for i in range(4)]
    seen, stop = [], threading.Event()

    def write(value):
        for _ in range(15):
            cache.store("shared", value)

    def read():
        while not stop.is_set():
            value = cache.load("shared")
            if value is not None:
                seen.append(value)

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(v,)) for v in values]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert seen and all(v in values for v in seen)
    assert [p.name for p in graph_cache_dir.iterdir()] == ["shared.pkl"]  # no temporary file left


def test_the_cache_can_be_turned_off(tmp_path, graph_cache_dir, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, "off")
    assert cache.cache_dir() is None
    assert run_pipeline(user_recipe(tmp_path / "mine")).passed
    assert entries(graph_cache_dir) == []
    monkeypatch.delenv(cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "dse" / "graphs"
