"""Evidence that proves itself: `dse evidence gc` racing a real sweep loses nothing and
touches only the files dse wrote; a file altered, removed or replaced by a link is named
(file, digest expected, digest found) by every view that reads it - `dse evidence verify`,
`get`, `show`, `report`, `export` and the UI's download - each with exit code 2 or a 4xx."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from pg import pg_server, pg_url  # noqa: F401  (fixtures)
from test_lifecycle import HAND
from uiserver import dse_ui_process

from dse.cli import main
from dse.records import Store
from dse.records.blobs import blob_path, check_blob
from dse.runner import run_sweep

REPO = Path(__file__).resolve().parents[1]
SPEC = HAND.replace('name = "hand"', 'name = "raced"') + '\n[stages]\nemulator = "top_k"\ntop_k = 2\nhost_time_repeats = 1\n'
MAX_GC_ROUNDS = 20_000  # the collector's loop is bounded even if the stop file never comes

# `dse evidence gc`'s work in a loop, in its own process, until the stop file appears.
GC_LOOP = """
import pathlib, sys, time
from dse.records import Store
db, stop, limit = sys.argv[1], pathlib.Path(sys.argv[2]), int(sys.argv[3])
rounds = removed = 0
with Store(db) as store:
    while not stop.exists() and rounds < limit:
        removed += store.collect_evidence_garbage().files
        rounds += 1
        if rounds == 1:
            print("looping", flush=True)
        time.sleep(0.005)  # a round every few ms: many during each write, without taking a whole core
print(rounds, removed)
"""


@pytest.fixture(scope="module")
def shared_graph_cache(tmp_path_factory):
    """One graph cache for the module's sweeps: the gemm recipe is captured once."""
    return tmp_path_factory.mktemp("graphs")


def plant(root: Path, outside: Path) -> dict[str, Path]:
    """What a user might leave in the evidence folder, and one file of dse's no row names."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "ab").mkdir(exist_ok=True)
    (root / "cd").mkdir(exist_ok=True)
    (root / "ef").mkdir(exist_ok=True)
    planted = {"foreign": root / "ab" / "my-notes.txt", "top": root / "README.txt",
               "link": root / "cd" / ("cd" + "0" * 62), "garbage": root / "ef" / ("ef" + "1" * 62)}
    planted["foreign"].write_text("mine")
    planted["top"].write_text("mine too")
    outside.write_text("a file outside the evidence folder")
    planted["link"].symlink_to(outside)
    planted["garbage"].write_bytes(b"left by a deleted experiment")
    return planted


def sweep_under_gc(db: str, root: Path, work: Path, cache: Path, monkeypatch) -> int:
    """A real small sweep (2 candidates emulated, their raw evidence kept) while another
    process collects garbage in a loop; the collector's rounds."""
    monkeypatch.setenv("DSE_CACHE_DIR", str(cache))
    spec = work / "raced.toml"
    spec.write_text(SPEC)
    Store(db).close()  # the schema, before the collector opens it
    stop = work / "stop"
    gc = subprocess.Popen([sys.executable, "-c", GC_LOOP, db, str(stop), str(MAX_GC_ROUNDS)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        # The collector is looping before the first file is written (its imports take seconds
        # on a loaded machine: no fixed wait is long enough).
        assert gc.stdout.readline() == "looping\n", gc.communicate()[1]
        result = run_sweep(spec, db, progress=False)
    finally:
        stop.touch()
        out, err = gc.communicate(timeout=120)
    assert gc.returncode == 0, err
    rounds, _ = map(int, out.split())
    assert result.evaluated == 3 and result.evidence_skipped == 0
    return rounds


def assert_nothing_lost(db: str, planted: dict[str, Path], outside: Path, rounds: int) -> None:
    assert rounds >= 5  # the collector ran all through the sweep
    with Store(db) as store:
        arts = store.artifacts("raced")
        runs = store.runs("raced")
        emulated = set(runs[(runs["stage"] == "emulator") & (runs["status"] == "ok")]["id"])
        assert len(emulated) == 2
        # each emulated run's files (its log, counters, replay manifest, bank lifetimes, inputs
        # and outputs), and the frontend's dumps
        for run in emulated:
            names = set(arts[arts["run_id"] == run]["name"])
            assert {"emulation.json", "counters.json", "replay.json", "banks.json"} <= names
            assert set(arts[arts["run_id"] == run]["role"]) == {"inputs", "log", "measurements", "outputs"}
        assert (arts["role"] == "graph_dump").sum() >= 1
        for row in arts.to_dict("records"):  # every row names a file whose content hashes to its digest
            path = Path(row["path"])
            assert path.is_file() and not path.is_symlink(), row
            assert hashlib.sha256(path.read_bytes()).hexdigest() == row["sha256"], row
        check = store.check_evidence()
        assert not check.bad and check.counts["ok"] == arts["sha256"].nunique()
    # the collector left what it did not write, and removed dse's own file no row names
    assert planted["foreign"].read_text() == "mine" and planted["top"].read_text() == "mine too"
    assert planted["link"].is_symlink() and outside.read_text() == "a file outside the evidence folder"
    assert not planted["garbage"].exists()


@pytest.fixture(scope="module")
def swept(tmp_path_factory, shared_graph_cache):
    """A SQLite store swept while gc looped, the planted files and the collector's rounds."""
    work = tmp_path_factory.mktemp("raced")
    db = str(work / "records.db")
    root = Path(f"{db}.evidence")
    outside = work / "outside.txt"
    planted = plant(root, outside)
    with pytest.MonkeyPatch.context() as monkeypatch:
        rounds = sweep_under_gc(db, root, work, shared_graph_cache, monkeypatch)
    return db, planted, outside, rounds


def test_gc_looping_during_a_sweep_loses_nothing_on_sqlite(swept):
    assert_nothing_lost(*swept)


def test_gc_looping_during_a_sweep_loses_nothing_on_postgresql(pg_url, tmp_path, shared_graph_cache,  # noqa: F811
                                                                monkeypatch):
    root = tmp_path / "evidence"
    monkeypatch.setenv("DSE_EVIDENCE_DIR", str(root))
    outside = tmp_path / "outside.txt"
    planted = plant(root, outside)
    rounds = sweep_under_gc(pg_url, root, tmp_path, shared_graph_cache, monkeypatch)
    assert_nothing_lost(pg_url, planted, outside, rounds)


def test_a_write_cut_between_row_and_rename_is_put_in_place_by_gc(tmp_path):
    db = tmp_path / "r.db"
    with Store(db) as store:
        exp = store.create_experiment("e", "h", [], "gemm", "w" * 64, "spec", "e")
        kept = store.put_artifact(b"evidence whose rename never happened", role="log", experiment_id=exp)
        # the state a crash after the row's commit leaves: the row, a pending file, no final file
        os.replace(kept.path, store.evidence_dir / ".incoming-crashed")
        (store.evidence_dir / ".incoming-orphan").write_bytes(b"a write whose row never came")
        assert check_blob(store.evidence_dir, kept.sha256).state == "missing"
        done = store.collect_evidence_garbage()
        assert (done.recovered, done.files, done.foreign) == (1, 1, 0)
        assert check_blob(store.evidence_dir, kept.sha256).ok
        assert sorted(p.name for p in store.evidence_dir.iterdir()) == [".lock", kept.sha256[:2]]


# ---- tampering: every view names the same bad files ------------------------------------------


@pytest.fixture
def tampered(swept, tmp_path):
    """A copy of the swept store with one evidence file altered (same size), one removed
    and one replaced by a link to a file of the same content: their artifact ids and the
    line each view must print."""
    db = tmp_path / "records.db"
    shutil.copy(swept[0], db)
    shutil.copytree(f"{swept[0]}.evidence", f"{db}.evidence", symlinks=True)
    with Store(db) as store:
        arts = store.artifacts("raced")
        exp_id = int(store.experiment("raced")["id"])
    by_sha = arts.drop_duplicates("sha256")
    raw = by_sha[by_sha["role"].isin(["log", "measurements"])].sort_values("id")
    altered, missing, linked = (raw.iloc[i] for i in range(3))
    root = Path(f"{db}.evidence")
    path = blob_path(root, altered["sha256"])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(data))
    blob_path(root, missing["sha256"]).unlink()
    target = blob_path(root, linked["sha256"])
    copy = tmp_path / "elsewhere.json"
    shutil.copy(target, copy)
    target.unlink()
    target.symlink_to(copy)  # the very content: served through a link all the same, were links followed
    found = hashlib.sha256(bytes(data)).hexdigest()
    lines = {
        "altered": f"{path}: evidence altered: sha256 expected {altered['sha256']}, found {found}",
        "missing": f"{blob_path(root, missing['sha256'])}: evidence missing: sha256 expected {missing['sha256']}, "
                   "found no file",
        "refused": f"{target}: evidence refused, never served: a symbolic link planted in the evidence folder, "
                   f"pointing to {copy}",
    }
    ids = {"altered": int(altered["id"]), "missing": int(missing["id"]), "refused": int(linked["id"])}
    runs = {"altered": int(altered["run_id"]), "missing": int(missing["run_id"]), "refused": int(linked["run_id"])}
    ok = by_sha[by_sha["role"] == "outputs"].iloc[0]
    shas = {altered["sha256"], missing["sha256"], linked["sha256"]}
    return dict(db=str(db), exp=exp_id, lines=lines, ids=ids, runs=runs, ok=ok, n=len(by_sha), shas=shas)


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def bad_lines(text: str) -> set[str]:
    return {line.strip()[2:].split(" (artifact ")[0] for line in text.splitlines() if line.strip().startswith("! ")}


def test_verify_get_show_report_and_export_name_the_same_bad_files(tampered, capsys, tmp_path):
    db, lines = tampered["db"], tampered["lines"]
    expected = set(lines.values())
    code, out, err = cli(capsys, "evidence", "verify", "--db", db)
    assert code == 2 and {line.split(" (artifact ")[0] for line in out.splitlines()[:-1]} == expected
    assert f"evidence files: {tampered['n'] - 3} ok, 1 missing, 1 altered, 1 refused" in out
    assert err.startswith("dse: error: evidence files:") and len(err.splitlines()) == 1

    for state, ident in tampered["ids"].items():  # a read of one file: the one line, exit 2
        code, out, err = cli(capsys, "evidence", "get", ident, "--out", tmp_path, "--db", db)
        assert code == 2 and err.strip() == f"dse: error: {lines[state]}", err
    ok = tampered["ok"]
    code, out, _ = cli(capsys, "evidence", "get", int(ok["id"]), "--out", tmp_path / "ok.npy", "--db", db)
    assert code == 0 and hashlib.sha256((tmp_path / "ok.npy").read_bytes()).hexdigest() == ok["sha256"]

    code, out, err = cli(capsys, "show", "raced", "--db", db)
    assert code == 2 and bad_lines(out) == expected and "1 missing, 1 altered, 1 refused" in out
    for state, run in tampered["runs"].items():
        code, out, err = cli(capsys, "show", f"r{run}", "--db", db)
        assert code == 2 and lines[state] in bad_lines(out) and f" {state} " in out  # the table's column
    with Store(db) as store:
        cand = int(store.run(tampered["runs"]["altered"])["candidate_id"])
    code, out, _ = cli(capsys, "show", f"c{cand}", "--db", db)
    assert code == 2 and lines["altered"] in bad_lines(out)

    code, out, err = cli(capsys, "report", "raced", "--out", tmp_path / "rep", "--db", db)
    assert code == 2 and bad_lines(out) == expected and "dse: error:" in err
    html = (tmp_path / "rep" / "raced.html").read_text()
    md = (tmp_path / "rep" / "raced.md").read_text()
    assert all(line in html and line in md for line in expected)

    code, out, err = cli(capsys, "export", "raced", "--out", tmp_path / "exp", "--db", db)
    assert code == 2 and bad_lines(out) == expected
    rows = list(csv.DictReader(io.StringIO((tmp_path / "exp" / "artifacts.csv").read_text())))
    states = {int(r["id"]): r["evidence"] for r in rows}
    assert {states[i] for i in tampered["ids"].values()} == {"altered", "missing", "refused"}
    assert all(states[int(r["id"])] == "ok" for r in rows if r["sha256"] not in tampered["shas"])


def test_the_ui_serves_only_evidence_that_hashes_right_and_never_a_link(tampered):
    statuses = {"altered": 409, "missing": 410, "refused": 403}
    with dse_ui_process(tampered["db"]) as (base, _):
        for state, ident in tampered["ids"].items():
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(f"{base}/artifacts/{ident}", timeout=30)
            body = caught.value.read().decode()
            assert caught.value.code == statuses[state]
            assert tampered["lines"][state].replace(">", "&gt;") in body.replace("&#39;", "'")
            assert "Traceback" not in body and "Error:" not in body
        ok = tampered["ok"]
        with contextlib.closing(urllib.request.urlopen(f"{base}/artifacts/{int(ok['id'])}", timeout=30)) as reply:
            data = reply.read()
            assert reply.status == 200 and "attachment" in reply.headers["Content-Disposition"]
        assert hashlib.sha256(data).hexdigest() == ok["sha256"]

