"""A hand-picked Ball set in either documented form, printed as its kinds; a candidate a
constraint rejects named so; the sweep's summary and `dse show` counting candidates by the
one classification (`dse.records.outcomes.outcome`)."""

from __future__ import annotations

import re

import pytest

from dse.records.outcomes import outcome
from dse.runner.launch import run_sweep

SPEC = """
[experiment]
name = "{name}"
hypothesis = "the matrix Ball alone runs a GEMM"

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

[[candidates]]
set = {{ "chip.balls" = {balls} }}
why = "only the matrix Ball"

[[constraints]]
expr = "bank_count >= 8"
reason = "eight banks at least"

[[objectives]]
metric = "latency_cycles"
direction = "minimize"

[stages]
emulator = "top_k"
top_k = 1
ppa = false
"""


def write(tmp_path, name: str, balls: str):
    path = tmp_path / f"{name}.toml"
    path.write_text(SPEC.format(name=name, balls=balls))
    return path


def test_outcome_names_a_constraint_rejection_and_a_pruned_infeasible_candidate():
    assert outcome("infeasible", "rejected by constraint 'x >= 8': it does not hold") == "rejected by constraint"
    assert outcome("pruned", "not emulated: rejected by constraint 'x >= 8': it does not hold") \
        == "rejected by constraint"
    assert outcome("infeasible", "constraint 'x >= 8' does not hold") == "rejected by constraint"  # older stores
    assert outcome("pruned", "not emulated: analytically infeasible: needs 12 banks, has 4") == "infeasible"
    assert outcome("pruned", "not emulated: rank 3 of 3 feasible by the analytical latency_cycles") == "pruned"
    assert outcome("infeasible", "needs 12 banks, has 4") == "infeasible"
    assert (outcome("ok", None), outcome(None, None)) == ("ok", "not run")


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The list form swept (emulator top 1) by the CLI in this process: the sweep's printed
    summary and `dse show`."""
    import contextlib
    import io

    from dse.cli import main

    tmp = tmp_path_factory.mktemp("outcomes")
    db = tmp / "r.db"

    def dse(*args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
        return code, out.getvalue(), err.getvalue()

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DSE_CACHE_DIR", str(tmp / "cache"))
        code, sweep_out, err = dse("sweep", write(tmp, "hand_balls", '["matrix"]'), "--db", db, "--no-progress")
        assert code == 0, err
        code, show_out, err = dse("show", "hand_balls", "--db", db)
        assert code == 0, err
        yield tmp, db, sweep_out, show_out, dse


def test_a_list_of_ball_kinds_is_taken_and_printed_as_its_kinds(swept):
    _, _, sweep_out, show_out, _ = swept
    rows = {int(line.split()[0]): line for line in show_out.splitlines() if re.match(r"^\s+\d+\s+(baseline|hand|grid)", line)}
    assert "balls=matrix " in rows[2] and "only the matrix Ball" in rows[2]
    assert "kind" not in rows[2] and "array_rows" not in show_out  # not whole Ball definitions


def test_the_list_and_the_string_form_are_one_candidate(swept, tmp_path):
    from dse.runner.candidates import CandidateBuilder
    from dse.runner.spec import load_spec

    as_list, as_text = (load_spec(write(tmp_path, n, b)) for n, b in (("a", '["relu", "matrix"]'), ("b", '"matrix"')))
    assert as_list.hand[0][0] == {"chip.balls": "matrix,relu"} and as_text.hand[0][0] == {"chip.balls": "matrix"}
    as_list.hand[0][0]["chip.balls"] = "matrix"  # the same kinds as the string form: one candidate
    hashes = [CandidateBuilder(s).build(s.hand[0][0]).hash for s in (as_list, as_text)]
    assert hashes[0] == hashes[1]
    chip, _ = as_list.apply(as_list.hand[0][0])
    assert [b.kind for b in chip.balls] == ["matrix"]


def test_a_ball_the_baseline_lacks_or_a_bad_form_is_one_line_exit_2(swept):
    tmp, _, _, _, dse = swept
    for name, balls, says in (("bad_kind", '["matrix", "tensorcore"]', "tensorcore"),
                              ("bad_form", "[1, 2]", "a list of Ball kinds or a comma-separated string")):
        code, out, err = dse("sweep", write(tmp, name, balls), "--db", tmp / f"{name}.db", "--no-progress")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert "candidates[0].set" in err and says in err
        assert not (tmp / f"{name}.db").exists()


def test_the_sweep_and_show_count_candidates_by_one_outcome(swept):
    _, _, sweep_out, show_out, dse = swept
    # c1 baseline emulated; c2 (hand) and c4 (8 banks) feasible, outside the top 1; c3 (4 banks) rejected.
    expected = "2 pruned, 1 ok, 1 rejected by constraint"
    assert f"candidates: {expected}" in sweep_out
    assert f"candidates: 4 ({expected})" in show_out
    row = next(line for line in show_out.splitlines() if re.match(r"^\s+3\s+grid", line))
    # the row names its outcome and refers to its reason, said once among the grouped reasons
    ref = re.search(r"\[(\d+)\]", row).group(1)
    reason = next(line for line in show_out.splitlines() if line.strip().startswith(f"[{ref}]"))
    assert "rejected by constraint" in row and "not emulated: rejected by constraint 'bank_count" in reason
    assert "analytically infeasible" not in show_out and " infeasible " not in row
