"""The graph cache: a pipeline's result served from disk under its content identity, never
stale (the key covers the source), corrupt entries rebuilt, LRU eviction, atomic writes."""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np
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


def test_arrays_are_served_as_writable_views_of_the_mapped_entry(graph_cache_dir):
    import mmap


    value = {"w": np.arange(24, dtype=np.float32).reshape(4, 6), "f": np.asfortranarray(np.eye(3, dtype=np.int8)),
             "strided": np.arange(10, dtype=np.int32)[::3], "name": "x"}
    path = cache.store("arrays", value)
    got = cache.load("arrays")
    assert got["name"] == "x" and all(np.array_equal(got[k], value[k]) and got[k].dtype == value[k].dtype
                                      for k in ("w", "f", "strided"))
    assert got["f"].flags.f_contiguous
    base = got["w"]
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(memoryview(base).obj, mmap.mmap)  # not read into memory: a view of the file's mapping
    got["w"][0, 0] = -1.0  # copy-on-write: the entry on disk keeps its value
    assert cache.load("arrays")["w"][0, 0] == 0.0
    path.write_bytes(path.read_bytes()[:-8])  # a buffer cut short: a miss, and the entry goes
    assert cache.load("arrays") is None and not path.exists()


def test_the_listed_digest_is_the_written_files_own(graph_cache_dir):
    """The hash runs beside the writes (a thread): the manifest's digest and size are still
    those of the file's bytes in order, header, pickle, padding and every buffer."""

    rng = np.random.default_rng(3)
    value = {f"b{i}": rng.integers(0, 255, size=n, dtype=np.uint8) for i, n in enumerate((1, 63, 65, 4099, 300_001))}
    value["text"] = "x" * 5000
    path = cache.store("digest", value)
    listed = json.loads((graph_cache_dir / cache.MANIFEST).read_text())["entries"][path.name]
    data = path.read_bytes()
    assert {k: listed[k] for k in ("sha256", "size")} == {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    got = cache.load("digest")
    assert got["text"] == value["text"] and all(np.array_equal(got[k], value[k]) for k in value if k != "text")


def mapped_rss(path) -> int:
    """Bytes of `path`'s mapping(s) resident in this process (/proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        if line[:1].isdigit() or line[:1] in "abcdef":  # a mapping's header line
            inside = line.rstrip().endswith(str(path))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_a_hit_holds_only_the_pages_its_caller_reads(graph_cache_dir, monkeypatch):
    """The digest check reads the whole entry (a real layer's is 2 GB): its pages are given
    back as hashed, so the process holds what its caller then reads, not the entry."""
    monkeypatch.setattr(cache, "_HASHED_CHUNK", 2 ** 20)  # several chunks in a small entry
    rng = np.random.default_rng(5)
    value = {"big": rng.integers(-128, 127, size=24 * 2 ** 20, dtype=np.int8), "small": np.arange(1000)}
    path = cache.store("paged", value)
    os.utime(path)  # touched since its writer vouched for it: the hit hashes it
    got = cache.load("paged")
    assert mapped_rss(path) < 2 ** 20  # the pickle's head only; the whole entry hashed (24 MiB)
    assert np.array_equal(got["small"], value["small"])
    assert np.array_equal(got["big"], value["big"])  # read again from the file: its bytes, whole
    assert mapped_rss(path) >= 24 * 2 ** 20
    got["big"][0] = 7  # a hit's copy-on-write stays its own
    assert cache.load("paged")["big"][0] == value["big"][0]


def hashed_loads(monkeypatch) -> list[int]:
    """Counts the loads that hash their entry."""
    calls = []
    digest = cache._digest
    monkeypatch.setattr(cache, "_digest", lambda mapped: calls.append(1) or digest(mapped))
    return calls


@pytest.mark.skipif(not os.path.exists("/proc/sys/kernel/random/boot_id"), reason="needs a boot id")
def test_an_entry_is_hashed_once_a_boot_until_its_file_changes(graph_cache_dir, monkeypatch, capsys):
    calls = hashed_loads(monkeypatch)
    value = {"w": np.arange(4096, dtype=np.int32), "name": "kept"}
    path = cache.store("once", value)
    past = os.stat(path).st_mtime_ns - 10**10  # written 10 s ago: past the racy window
    os.utime(path, ns=(past, past))
    for _ in range(3):
        got = cache.load("once")
        assert got["name"] == "kept" and np.array_equal(got["w"], value["w"])
    assert len(calls) == 1  # the first hit hashed it, the later ones trusted its record
    listed = json.loads((graph_cache_dir / cache.MANIFEST).read_text())["entries"][path.name]
    assert listed["seen"]["mtime_ns"] == past and listed["seen"]["size"] == path.stat().st_size
    assert os.stat(path).st_mtime_ns == past and os.stat(path).st_atime_ns > past  # a hit: its access time only

    monkeypatch.setattr(cache, "_boot_id", lambda: "another boot")  # after a reboot (a crash may have torn it): hashed
    assert cache.load("once")["name"] == "kept" and len(calls) == 2

    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the same size, another byte: the file's modification time tells
    path.write_bytes(bytes(data))
    assert cache.load("once") is None and len(calls) == 3 and not path.exists()
    assert "is corrupt" in capsys.readouterr().err


def test_an_entry_modified_within_the_racy_window_is_hashed_every_time(graph_cache_dir, monkeypatch):
    calls = hashed_loads(monkeypatch)
    path = cache.store("fresh", {"w": np.arange(16)})
    os.utime(path)  # just modified: a change in the same tick would not show
    for _ in range(2):
        assert np.array_equal(cache.load("fresh")["w"], np.arange(16))
    assert len(calls) == 2
    listed = json.loads((graph_cache_dir / cache.MANIFEST).read_text())["entries"][path.name]
    assert listed["seen"]["mtime_ns"] != os.stat(path).st_mtime_ns  # the writer's record, not this file's


@pytest.mark.skipif(not os.path.exists("/proc/sys/kernel/random/boot_id"), reason="needs a boot id")
def test_the_writer_vouches_for_what_it_hashed_as_it_wrote(graph_cache_dir, monkeypatch, capsys):
    """The first hit after the write hashes nothing (a real layer's 2 GB entry: 1.3 s); the
    entry's modification time is set back past the racy window, so that a change in place,
    at once, still tells."""
    calls = hashed_loads(monkeypatch)
    value = {"w": np.arange(4096, dtype=np.int32)}
    path = cache.store("vouched", value)
    listed = json.loads((graph_cache_dir / cache.MANIFEST).read_text())["entries"][path.name]
    st = os.stat(path)
    assert listed["seen"] == {"boot": cache._boot_id(), "ino": st.st_ino, "size": st.st_size,
                              "mtime_ns": st.st_mtime_ns}
    assert time.time_ns() - st.st_mtime_ns > cache.RACY_S * 1e9
    assert np.array_equal(cache.load("vouched")["w"], value["w"]) and calls == []
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # changed at once, the same size
    path.write_bytes(bytes(data))
    assert cache.load("vouched") is None and len(calls) == 1 and "is corrupt" in capsys.readouterr().err


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
    # no temporary file left: the entry, the manifest listing it and the folder's lock
    assert sorted(p.name for p in graph_cache_dir.iterdir()) == [".lock", "manifest.json", "shared.pkl"]


def test_the_cache_can_be_turned_off(tmp_path, graph_cache_dir, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, "off")
    assert cache.cache_dir() is None
    assert run_pipeline(user_recipe(tmp_path / "mine")).passed
    assert entries(graph_cache_dir) == []
    monkeypatch.delenv(cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "dse" / "graphs"


def test_checked_and_unchecked_runs_share_one_key(tmp_path, graph_cache_dir, monkeypatch):
    folder = user_recipe(tmp_path / "mine")
    quick = run_pipeline(folder, check=False)
    assert not quick.checked and math.isnan(quick.stages[0].max_abs_error)
    checked = run_pipeline(folder)  # an unchecked entry cannot stand for the checks: they run
    assert checked.checked and checked.passed and not math.isnan(checked.stages[0].max_abs_error)
    assert len(entries(graph_cache_dir)) == 1  # the checked run replaced the unchecked entry

    def no_capture(*args, **kwargs):
        raise AssertionError("captured again")

    monkeypatch.setattr(pipeline, "_run", no_capture)
    served = run_pipeline(folder, check=False)  # ... and serves an unchecked request
    assert served.checked and [s.to_dict() for s in served.stages] == [s.to_dict() for s in checked.stages]


# Serves a cached pipeline in a fresh interpreter; says whether torch was imported to do it,
# then thaws the reference tensors it was checked on.
SERVE = """
import json, sys
from dse.frontend import run_pipeline
pipe = run_pipeline(sys.argv[1], check=False)
light = "torch" not in sys.modules
print(json.dumps({"light": light, "dump": pipe.graph.dump(), "inputs": [t.tolist() for t in pipe.inputs],
                  "expected": [t.tolist() for t in pipe.expected], "dtypes": [str(t.dtype) for t in pipe.expected]}))
"""


def test_a_cached_pipeline_is_served_without_torch_and_keeps_its_reference(tmp_path, graph_cache_dir, repo):
    folder = user_recipe(tmp_path / "mine")
    first = run_pipeline(folder)
    p = subprocess.run([sys.executable, "-c", SERVE, str(folder)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["light"] and out["dump"] == first.graph.dump()
    assert out["inputs"] == [t.tolist() for t in first.inputs]
    assert out["expected"] == [t.tolist() for t in first.expected] and out["dtypes"] == ["torch.float32"]


# A rerun of a recorded sweep in a fresh interpreter: what it printed and what it imported.
RERUN = """
import contextlib, io, json, sys
from dse.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["sweep", sys.argv[1], "--db", sys.argv[2], "--no-progress"])
print(json.dumps({"code": code, "out": out.getvalue(), "torch": "torch" in sys.modules}))
"""


def test_a_rerun_of_a_recorded_sweep_imports_no_torch(tmp_path, graph_cache_dir, repo):
    from test_runner import write_spec

    from dse.runner import run_sweep

    spec, db = write_spec(tmp_path), tmp_path / "r.db"
    assert run_sweep(spec, db, progress=False).evaluated == 10
    p = subprocess.run([sys.executable, "-c", RERUN, str(spec), str(db)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(repo)}, check=False)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["code"] == 0 and "0 evaluated, 10 already recorded" in out["out"]
    assert not out["torch"]


def test_capture_and_frontend_with_the_emulator_capture_once(monkeypatch):
    """The sweep's capture stage runs the checked pipeline when the emulator stage will need
    it; the frontend stage's unchecked (analytical) and checked (emulation) graphs are then
    read from the cache: one capture for the three."""
    from dse.runner.chain import CAPTURE, FRONTEND

    capture_module = importlib.import_module("dse.workload.capture")  # the package's `capture` is the function
    calls, real = [], capture_module.capture
    monkeypatch.setattr(capture_module, "capture", lambda *a, **k: calls.append(a) or real(*a, **k))
    params = {"m": 16, "n": 16, "k": 16}
    graph = CAPTURE.run("gemm", params, True)
    work = FRONTEND.run("gemm", params, [None])
    assert len(calls) == 1 and work.emulation is not None and graph.ops


def test_eviction_deletes_only_the_entries_the_cache_wrote(graph_cache_dir, monkeypatch):
    foreign = {"mine.pkl": b"a user's pickle" * 200, "notes.txt": b"mine", ("f" * 64) + ".pkl": b"not listed" * 300}
    for name, data in foreign.items():  # older than every entry, and larger than the limit together
        (graph_cache_dir / name).write_bytes(data)
        os.utime(graph_cache_dir / name, (1, 1))
    monkeypatch.setenv(cache.MAX_BYTES_ENV, "2500")
    for i, key in enumerate(("a", "b", "c")):
        assert cache.store(key, b"x" * 1000) is not None
        os.utime(graph_cache_dir / f"{key}.pkl", (1000 + i, 1000 + i))
    assert [p.stem for p in entries(graph_cache_dir) if len(p.stem) == 1] == ["b", "c"]  # "a" went, its own
    assert all((graph_cache_dir / name).read_bytes() == data for name, data in foreign.items())
    assert cache.load("f" * 64) is None and (graph_cache_dir / f"{'f' * 64}.pkl").exists()  # not ours: not read
    listed = json.loads((graph_cache_dir / cache.MANIFEST).read_text())["entries"]
    assert sorted(listed) == ["b.pkl", "c.pkl"] and all(len(e["sha256"]) == 64 for e in listed.values())


def flip_every_buffer(entry) -> None:
    """Flip a byte in the middle of each out-of-band buffer (the weights, the reference
    tensors) of an entry: the file keeps its size and still parses."""
    data = bytearray(entry.read_bytes())
    head = len(cache.MAGIC)
    _, count = cache._COUNTS.unpack_from(data, head)
    for i in range(count):
        start, length = cache._EXTENT.unpack_from(data, head + cache._COUNTS.size + i * cache._EXTENT.size)
        if length >= 4:
            data[start + length // 2 + 3] ^= 0x40  # an exponent bit of a float32
    entry.write_bytes(bytes(data))


def test_a_corrupted_entry_is_detected_rebuilt_and_said_and_emulate_stays_right(tmp_path, graph_cache_dir, capsys):
    from dse.cli import main

    folder = user_recipe(tmp_path / "mine")
    assert main(["emulate", "--chip", "toy", "--recipe", str(folder), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    (entry,) = entries(graph_cache_dir)
    listed = json.loads((graph_cache_dir / cache.MANIFEST).read_text())["entries"][entry.name]["sha256"]
    flip_every_buffer(entry)
    found = hashlib.sha256(entry.read_bytes()).hexdigest()
    assert main(["emulate", "--chip", "toy", "--recipe", str(folder), "--json"]) == 0
    out, err = capsys.readouterr()
    again = json.loads(out)
    assert again["numerics"] == first["numerics"] and again["cycles"] == first["cycles"]
    assert err.strip() == (f"dse: graph cache entry {entry} is corrupt (sha256 expected {listed}, found {found}); "
                           "removed, rebuilding it")
    rebuilt = json.loads((graph_cache_dir / cache.MANIFEST).read_text())["entries"][entry.name]["sha256"]
    assert hashlib.sha256(entry.read_bytes()).hexdigest() == rebuilt  # rebuilt whole, and listed
    assert cache.load(entry.stem) is not None and capsys.readouterr().err == ""


def test_an_edited_source_changes_the_key_though_its_digest_is_kept(tmp_path, monkeypatch):
    """The key hashes a source file only when its stat changed since it was last read: an
    edit still changes the key, whether just made (racy: hashed every time), made long
    after, or of the same size with the modification time put back (its ctime moved)."""
    folder = tmp_path / "recipe"
    folder.mkdir()
    model = folder / "model.py"
    model.write_text("A = 1\n")
    first = cache.pipeline_key(folder, {}, None)
    model.write_text("A = 2\n")  # same size, within the file system's timestamp tick
    second = cache.pipeline_key(folder, {}, None)
    assert second != first
    old = (1_000_000_000, 1_000_000_000)
    os.utime(model, old)
    monkeypatch.setattr(cache, "RACY_S", 0.0)  # (else kept only once its ctime, now, is RACY_S old)
    kept = cache.pipeline_key(folder, {}, None)
    assert kept == second and str(model) in cache._DIGESTS  # an old file's digest is kept...
    assert cache.pipeline_key(folder, {}, None) == second  # ...and used
    model.write_text("A = 3\n")
    os.utime(model, old)  # same size and mtime as the kept digest's: the ctime tells
    third = cache.pipeline_key(folder, {}, None)
    assert third not in (first, second)
    (folder / "steps.toml").write_text("")  # a new file: another key
    assert cache.pipeline_key(folder, {}, None) != third


def test_the_installed_versions_in_the_key_are_read_again_when_the_path_changes(tmp_path, monkeypatch):
    """torch's and numpy's versions are kept by the import path's folders' stat: a package
    installed into a folder of the path, or removed, is read at once."""

    real = version("numpy")
    assert cache._installed_version("numpy") == real
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    assert cache._installed_version("numpy") == real
    os.utime(site, (1, 1))  # an old folder, then a package installed into it
    dist = site / "numpy-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 0.0.1\n")
    assert version("numpy") == "0.0.1" == cache._installed_version("numpy")
    os.utime(site, (1, 1))
    assert cache._installed_version("numpy") == "0.0.1"  # kept
    (dist / "METADATA").unlink()
    dist.rmdir()  # removed again
    assert cache._installed_version("numpy") == real


@pytest.fixture(scope="module")
def module_cache_dir():
    """The graph cache a module-scoped fixture sees (set up before any test's own)."""
    return cache.cache_dir()


def test_module_scoped_fixtures_get_a_temporary_cache_too(module_cache_dir):
    # (a module fixture ran before the per-test cache was set: it wrote ~/.cache/dse/graphs)
    assert module_cache_dir is not None and Path.home() not in module_cache_dir.resolve().parents
