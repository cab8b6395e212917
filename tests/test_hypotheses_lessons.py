"""Records beyond a sweep's evidence: `dse propose` records an untested hypothesis (every
view says "not run yet" until a sweep of its spec runs it); `dse lesson` records a lesson
or reusable method linked to the experiments it came from. Real SQLite stores, a real
sweep (analytical stage only), a real `dse ui` server."""

from __future__ import annotations

import html
import urllib.request

import pytest

from dse.records import Store
from uiserver import dse_ui_thread

SPEC = """
[experiment]
name = "{name}"
hypothesis = "{hypothesis}"

[workload]
recipe = "gemm"
params = {{ m = 16, n = 16, k = 16 }}

[baseline]
chip = "toy"
mapping = {{ policy = "framework", double_buffer = false, workers = 1 }}

[[space]]
name = "bank_count"
target = "chip.banks.count"
values = [4, 8]

[[objectives]]
metric = "latency_cycles"
direction = "minimize"

[stages]
emulator = "none"
ppa = false
"""


def write(folder, name: str, hypothesis: str = "eight banks beat four for a 16x16x16 GEMM"):
    path = folder / f"{name}.toml"
    path.write_text(SPEC.format(name=name, hypothesis=hypothesis))
    return path


@pytest.fixture(scope="module")
def proposed(tmp_path_factory):
    """A store holding 'untested' (proposed only) and 'swept' (proposed, then swept)."""
    from dse.runner.launch import run_sweep
    from dse.runner.propose import propose

    folder = tmp_path_factory.mktemp("propose")
    db = folder / "records.db"
    assert propose(write(folder, "untested"), db)[1:] == ("proposed", True)
    swept = write(folder, "swept")
    assert propose(swept, db)[1:] == ("proposed", True)
    with Store(db) as store:
        before = store.experiment("swept")
    result = run_sweep(swept, db, progress=False)
    return folder, db, before, result


def test_propose_records_the_hypothesis_and_runs_no_stage(cli, proposed):
    folder, db, _, _ = proposed
    with Store(db) as store:
        exp = store.experiment("untested")
        assert (exp["status"], exp["hypothesis"], exp["baseline_candidate_id"]) == (
            "proposed", "eight banks beat four for a 16x16x16 GEMM", None)
        assert exp["spec_text"] == (folder / "untested.toml").read_text()
        assert store.candidates(exp["id"]).empty and store.runs(exp["id"]).empty
    # Again: the same experiment, nothing added.
    code, out, _ = cli("propose", folder / "untested.toml", "--db", db)
    assert code == 0 and out.startswith(f"experiment {exp['id']} already recorded (this spec): hypothesis proposed, "
                                        "not run yet")


def test_every_view_says_not_run_yet_until_a_sweep_runs_it(cli, proposed):
    _, db, _, _ = proposed
    code, out, _ = cli("history", "--db", db)
    rows = {line.split()[1]: line for line in out.splitlines()[1:3]}
    assert rows["untested"].split()[2:6] == ["proposed,", "not", "run", "yet"]
    assert rows["untested"].split()[7] == "0"  # candidates
    assert rows["swept"].split()[2] == "testing"
    code, out, _ = cli("show", "untested", "--db", db)
    assert code == 0
    assert "hypothesis proposed, not run yet" in out.splitlines()[0]
    assert "answer: not run yet: an untested hypothesis (dse propose)" in out
    assert "candidates: 0" in out
    with dse_ui_thread(str(db)) as base:
        listing = urllib.request.urlopen(base + "/").read().decode()
        with Store(db) as store:
            ident = store.experiment("untested")["id"]
        page = urllib.request.urlopen(f"{base}/experiments/{ident}").read().decode()
    assert ">proposed, not run yet</span>" in listing and ">testing</span>" in listing
    assert "not run yet: an untested hypothesis (dse propose)" in page
    # the report's headline: the same function's words
    from dse.report.data import experiment_view

    with Store(db) as store:
        assert experiment_view(store, "untested").headline.lines[2].startswith("not run yet: ")


def test_a_sweep_of_the_proposed_spec_runs_it_and_the_status_moves_on(proposed):
    _, db, before, result = proposed
    assert (before["status"], result.experiment_id, result.evaluated) == ("proposed", before["id"], 3)  # the baseline, 4 and 8 banks
    with Store(db) as store:
        exp = store.experiment("swept")
        assert exp["status"] == "testing" and exp["created_at"] == before["created_at"]
        assert len(store.candidates(exp["id"])) == 3


def test_propose_refuses_a_changed_spec_under_a_taken_name_and_bad_files(cli, proposed, tmp_path):
    folder, db, _, _ = proposed
    with Store(db) as store:
        n = len(store.experiments())
    changed = write(tmp_path, "untested", hypothesis="four banks are enough")
    code, out, err = cli("propose", changed, "--db", db)
    assert code == 2 and err.count("\n") == 1 and "experiment.name" in err and "'untested'" in err, err
    code, _, err = cli("propose", tmp_path / "missing.toml", "--db", db)
    assert code == 2 and err.count("\n") == 1 and "missing.toml" in err
    with Store(db) as store:
        assert len(store.experiments()) == n


# ---- dse lesson -----------------------------------------------------------------------------


def test_a_lesson_links_to_the_experiments_it_came_from_in_every_view(cli, proposed):
    _, db, _, _ = proposed
    with Store(db) as store:
        swept, untested = store.experiment("swept")["id"], store.experiment("untested")["id"]
    text = "Sweep the bank count before tiles: the tiles' legality follows the banks"
    code, out, err = cli("lesson", text, "--from", "swept", "--from", untested, "--author", "ann", "--db", db)
    assert code == 0, err
    ident = int(out.split()[1])
    assert out == f"lesson {ident} recorded by ann, from {swept} 'swept', {untested} 'untested'\n"
    with Store(db) as store:
        (lesson,) = store.lessons()
        assert (lesson["id"], lesson["text"], lesson["experiment_ids"]) == (ident, text, [swept, untested])
        assert store.lessons("untested") == store.lessons(swept) == [lesson]
    line = f"from {swept} 'swept', {untested} 'untested'): {text}"
    code, listed, _ = cli("lessons", "--db", db)
    assert code == 0 and listed.startswith(f"lesson {ident} (") and listed.rstrip().endswith(line)
    assert cli("lesson", "--list", "--db", db)[1] == listed
    for name in ("swept", "untested"):  # each linked experiment's `dse show` prints the same line
        code, out, _ = cli("show", name, "--db", db)
        assert f"  + {listed.strip()}" in out.splitlines()
    with dse_ui_thread(str(db)) as base:
        page = urllib.request.urlopen(f"{base}/experiments/{untested}").read().decode()
    item = page[page.index(f'<li id="lesson-{ident}">'):]
    item = html.unescape(item[:item.index("</li>")])
    assert f'<a href="/experiments/{swept}">{swept} \'swept\'</a>' in item
    assert f'<a href="/experiments/{untested}">{untested} \'untested\'</a>' in item
    assert f'<span class="text">{text}</span>' in item and ", ann; from" in item


def test_a_lesson_from_an_unknown_experiment_is_one_line_and_writes_nothing(cli, proposed):
    _, db, _, _ = proposed
    with Store(db) as store:
        before = len(store.notes())
    code, _, err = cli("lesson", "tiles follow banks", "--from", "swept", "--from", "swpet", "--db", db)
    assert code == 2 and err.count("\n") == 1 and "'swpet'" in err and "did you mean 'swept'?" in err, err
    code, _, err = cli("lesson", "  ", "--from", "swept", "--db", db)
    assert code == 2 and "a non-empty lesson" in err
    code, _, err = cli("lesson", "tiles follow banks", "--db", db)
    assert code == 2 and "--from" in err and err.count("\n") == 1
    with Store(db) as store:
        assert len(store.notes()) == before
