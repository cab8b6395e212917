"""Spec mistakes: a misspelt key, knob target, chip, recipe or experiment name gets one line
with "did you mean" (exit 2, nothing written); an edited spec under a used name says which
fields changed; `dse --version`."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.chips import load_chip
from dse.errors import InputError, close_matches, dotted_paths
from dse.records import Store
from dse.runner import build_spec
from dse.runner.spec import SpecModel, spec_changes
from test_records_cli import assert_input_error, fill
from test_runner import write_spec

SPEC = {"experiment": {"name": "typo", "hypothesis": "two workers beat one"},
        "workload": {"recipe": "gemm", "params": {"m": 32, "n": 32, "k": 32}},
        "baseline": {"chip": "goban", "mapping": {"workers": 1}},
        "space": [{"name": "workers", "target": "mapping.workers", "values": [1, 2]}],
        "objectives": [{"metric": "latency_cycles"}],
        "search": {"sampler": "grid", "trials": 5},
        "stages": {"ppa": False}}


def misspellings(word: str) -> st.SearchStrategy[str]:
    """One slip of the keyboard: a letter dropped, two neighbours swapped, or a letter doubled."""
    at = st.integers(0, len(word) - 2)
    return st.one_of(at.map(lambda i: word[:i] + word[i + 1:]),
                     at.map(lambda i: word[:i] + word[i + 1] + word[i] + word[i + 2:]),
                     at.map(lambda i: word[:i + 1] + word[i] + word[i + 1:]))


# (table, key) of the spec's tables whose keys a user types; each at least 4 letters.
TABLE_KEYS = [(table, key) for table in ("experiment", "search", "stages")
              for key in sorted(SpecModel.model_fields[table].annotation.model_fields) if len(key) >= 4]


@st.composite
def misspelt_keys(draw):
    table, key = draw(st.sampled_from(TABLE_KEYS))
    return table, key, draw(misspellings(key).filter(lambda w: w != key))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(misspelt_keys())
def test_a_misspelt_key_names_the_key_it_is_close_to(case):
    table, key, typo = case
    spec = {**SPEC, table: {**SPEC.get(table, {})}}
    value = spec[table].pop(key, None)
    spec[table][typo] = value if value is not None else 1
    with pytest.raises(InputError) as caught:
        build_spec(spec, where="typo.toml")
    error = caught.value
    assert error.field == f"{table}.{typo}" and error.value == typo
    assert key in error.suggestions, (typo, error.suggestions)
    assert f"did you mean '{key}'" in str(error) or f"'{key}' or" in str(error) or f"or '{key}'" in str(error)


def test_a_misspelt_required_key_is_one_line_with_the_missing_field(tmp_path, cli):
    path = write_spec(tmp_path)
    path.write_text(path.read_text().replace("hypothesis =", "hypotesis ="))
    db = tmp_path / "r.db"
    result = cli("sweep", path, "--db", db, "--no-progress")
    assert_input_error(result, str(path), "field 'experiment.hypotesis'", "did you mean 'hypothesis'?",
                       "required and missing: experiment.hypothesis")
    assert "Field required" not in result[2] and "Two workers beat one" not in result[2]  # no table dumped
    assert not db.exists()


CHIP_PATHS = dotted_paths(load_chip("goban").model_dump(mode="json"))


@st.composite
def misspelt_paths(draw):
    """A real dotted chip path with one of its parts (of at least 5 letters) misspelt."""
    path = draw(st.sampled_from([p for p in CHIP_PATHS if any(len(part) >= 5 for part in p.split("."))]))
    parts = path.split(".")
    i = draw(st.sampled_from([i for i, part in enumerate(parts) if len(part) >= 5]))
    typo = draw(misspellings(parts[i]).filter(lambda w: w != parts[i]))
    return path, ".".join([*parts[:i], typo, *parts[i + 1:]])


@settings(max_examples=40, deadline=None)
@given(misspelt_paths())
def test_a_misspelt_chip_path_suggests_the_real_one(case):
    path, typo = case
    if typo in CHIP_PATHS:  # the slip made another real path
        return
    with pytest.raises(InputError) as caught:
        load_chip("goban", {typo: 1}, overrides_source="--set")
    assert f"chip.{path}" in caught.value.suggestions, (typo, caught.value)


def test_knob_target_chip_recipe_and_metric_suggestions(tmp_path, cli):
    cases = [('target = "chip.banks.count"', 'target = "chip.bank.count"', "space[0].target", "'chip.banks.count'"),
             ('chip = "goban"', 'chip = "gobam"', "baseline.chip", "'goban'"),
             ('recipe = "gemm"', 'recipe = "gemn"', "workload.recipe", "'gemm'"),
             ('metric = "latency_cycles"', 'metric = "latency_cycle"', "objectives[0].metric", "'latency_cycles'")]
    for old, new, field, meant in cases:
        path = write_spec(tmp_path)
        path.write_text(path.read_text().replace(old, new, 1))
        assert_input_error(cli("sweep", path, "--db", tmp_path / "r.db", "--no-progress"),
                           f"field '{field}'", f"did you mean {meant}?")
    assert not (tmp_path / "r.db").exists()
    assert_input_error(cli("chips", "show", "gobn"), "did you mean 'goban'?")
    assert_input_error(cli("recipe", "show", "mpl"), "did you mean 'mlp'?")


def test_a_misspelt_experiment_name_is_suggested_by_every_command(tmp_path, cli):
    db = tmp_path / "r.db"
    with Store(db) as store:
        fill(store)
    for argv in (["show", "bnaks"], ["report", "bansk", "--out", tmp_path], ["decide", "bankss", "--refute", "--why", "x"],
                 ["note", "baks", "--note", "x"], ["export", "Banks", "--out", tmp_path]):
        assert_input_error(cli(*argv, "--db", db), "did you mean 'banks'?")
    code, out, _ = cli("recipe", "show", "mpl", "--json")
    assert code == 2 and '"did_you_mean": ["mlp"]' in out


def test_close_matches_keeps_only_the_closest():
    assert close_matches("bank.rows", ["banks.rows", "banks.row_bytes", "dma.burst"]) == ["banks.rows"]
    assert close_matches("zzz", ["banks.rows"]) == []


# The CLI's message on an edited spec: tests/test_runner.py::test_bad_spec_leaves_an_existing_store_untouched.
def test_spec_changes_says_added_removed_and_layout_only():
    old = 'a = 1\n[t]\nx = "p"\n[[k]]\nn = 1\n'
    assert spec_changes(old, old.replace("a = 1", "a = 1   # a comment")) == \
        "the same fields and values (only comments or layout differ)"
    assert spec_changes(old, old.replace('x = "p"', 'y = "p"')) == \
        "2 fields changed: t.x: 'p' -> (absent); t.y: (absent) -> 'p'"
    assert spec_changes(old, old + "[[k]]\nn = 2\n") == "1 field changed: k[1].n: (absent) -> 2"


def test_version_from_the_package_metadata_without_importing_commands(repo):
    from importlib.metadata import version

    # The child's CPU time, not the wall clock (on a loaded machine a start-up waits for the cores).
    started = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([sys.executable, "-c", "import sys; from dse.cli import main; code = None\n"
                        "try:\n main(['--version'])\nexcept SystemExit as e:\n code = e.code\n"
                        "print(code, sorted(m for m in sys.modules if m.startswith(('dse.cli.', 'torch', 'optuna', "
                        "'sqlalchemy', 'pandas'))))"],
                       capture_output=True, text=True, cwd=repo, timeout=60)
    ended = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = (ended.ru_utime - started.ru_utime) + (ended.ru_stime - started.ru_stime)
    assert p.stdout.splitlines() == [f"dse {version('dse')}", "0 []"], p.stderr
    assert seconds < 1, seconds  # 0.1 s measured; importing torch alone takes seconds
