"""Generated bad input at the CLI's edge (hypothesis): broken chip configs and experiment
specs (random bytes, wrong types, out-of-range and non-finite numbers, unknown keys, bad
formulas). Every one ends with exit 2 and exactly one line on stderr, no traceback, and a
sweep of a bad spec writes nothing to its store. Run in-process (`dse.cli.main`)."""

from __future__ import annotations

import json
import math
import sqlite3
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.cli import main

REPO = Path(__file__).resolve().parents[1]
TOY = tomllib.loads((REPO / "chip_configs" / "toy.toml").read_text())
GOBAN = tomllib.loads((REPO / "chip_configs" / "goban.toml").read_text())
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)


# -- a small TOML writer (the generated data is written as a user would) --------------------
def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def to_toml(data: dict) -> str:
    lines = [f"{json.dumps(k)} = {toml_value(v)}" for k, v in data.items() if not _is_table(v)]
    for k, v in data.items():
        if isinstance(v, dict) and _is_table(v):
            lines.append(f"[{json.dumps(k)}]")
            lines += [f"{json.dumps(a)} = {toml_value(b)}" for a, b in v.items()]
        elif _is_table(v):
            for item in v:
                lines.append(f"[[{json.dumps(k)}]]")
                lines += [f"{json.dumps(a)} = {toml_value(b)}" for a, b in item.items()]
    return "\n".join(lines) + "\n"


def _is_table(v) -> bool:
    return (isinstance(v, dict) and v and all(not isinstance(x, dict) or True for x in v.values())
            and not any(isinstance(x, list) and x and isinstance(x[0], dict) for x in v.values())) \
        or (isinstance(v, list) and v and all(isinstance(x, dict) for x in v))


def set_path(data: dict, dotted: str, value) -> dict:
    out = json.loads(json.dumps(data, allow_nan=True))
    node = out
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {}) if not p.isdigit() else node[int(p)]
    if leaf.isdigit():
        node[int(leaf)] = value
    else:
        node[leaf] = value
    return out


# -- strategies --------------------------------------------------------------------------
NUMBER_FIELDS = ["clock_mhz", "cores.count", "cores.tile_size", "cores.op_cycles_per_element", "banks.count",
                 "banks.rows", "banks.row_bytes", "banks.acc_col", "banks.channels", "dma.burst_max_bytes",
                 "dma.beat_bytes", "dma.latency_cycles", "isa.bank_id_bits", "front_end.rob_entries",
                 "balls.0.array_rows", "balls.0.read_ports", "shared_memory.banks", "cache.ways"]
BAD_NUMBERS = st.one_of(
    st.sampled_from([math.inf, -math.inf, math.nan, 0, -1, -5, 0.0, -0.5, 2 ** 63 - 1, -(2 ** 63), 1e308]),
    st.integers(-(2 ** 63), 2 ** 63 - 1).filter(lambda n: n <= 0 or n > 4096),
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda f: not (0 < f < 1e6)),
)
WRONG_TYPES = st.one_of(st.text(max_size=8), st.booleans(), st.lists(st.integers(), max_size=3),
                        st.dictionaries(st.sampled_from(["x", "count"]), st.integers(), max_size=2))
EXPLOSIVE = ["M*N*K/16 + 9**9**9**9", "M**M", "9**(9**9)", "(M**64)**64", "M*N*K/0", "1/(M-M)", "M**-1 * 0**-1",
             "(-8)**0.5", "1" * 400, "(" * 300 + "M" + ")" * 300, "M" + "+M" * 600, "__import__('os')", "M.__class__",
             "lambda: 1", "[M]", "'text'", "M if N else K", "", "M +", "1e400 * M", "log2(M - M)", "max(M)"]
FORMULAS = st.one_of(st.sampled_from(EXPLOSIVE), st.text(alphabet="MNKQ0123456789+-*/%() .", min_size=0, max_size=30))


@st.composite
def broken_chip(draw) -> bytes:
    kind = draw(st.sampled_from(["bytes", "number", "type", "unknown", "formula", "limits", "geometry"]))
    base = draw(st.sampled_from([TOY, GOBAN]))
    if kind == "bytes":
        return draw(st.one_of(st.binary(min_size=1, max_size=64),
                              st.binary(min_size=1, max_size=16).map(lambda b: b"\xff" + b)))
    if kind == "number":
        data = set_path(base, draw(st.sampled_from(NUMBER_FIELDS)), draw(BAD_NUMBERS))
    elif kind == "type":
        data = set_path(base, draw(st.sampled_from(NUMBER_FIELDS + ["name", "balls.0.kind", "balls"])),
                        draw(WRONG_TYPES))
    elif kind == "unknown":
        section = draw(st.sampled_from(["", "cores.", "banks.", "dma.", "balls.0."]))
        data = set_path(base, section + draw(st.sampled_from(["colour", "count_", "Banks", "x y"])), 1)
    elif kind == "formula":
        data = set_path(base, "balls.0.latency.ws", draw(FORMULAS))
    elif kind == "limits":
        data = set_path(GOBAN, "cores.count", draw(st.sampled_from([0, 65, 100, 1024, 2 ** 40])))
        if draw(st.booleans()):
            data = set_path(data, "limits", {draw(st.sampled_from(["banks.nope", "name", "balls", "limits.x"])):
                                             draw(st.sampled_from([[1, 2], [5, 1], ["a", "b"], [1]]))})
    else:  # fields that must agree
        data = set_path(base, "banks.acc_col", draw(st.integers(base["banks"]["count"] + 1, 10 ** 6)))
    return to_toml(data).encode("utf-8", "surrogatepass")


def run(capsys, argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(code: int, err: str) -> None:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("dse: error: "), err
    assert "Traceback" not in err


@SETTINGS
@given(content=broken_chip())
def test_generated_broken_chip_configs(content, tmp_path_factory, capsys):
    path = tmp_path_factory.mktemp("chip") / "chip.toml"
    path.write_bytes(content)
    code, out, err = run(capsys, ["chips", "validate", path])
    if code == 0:  # the change happened to leave a valid chip: fine, and it says so
        assert "valid chip" in out and err == ""
        return
    assert_one_line(code, err)
    assert str(path) in err


@SETTINGS
@given(field=st.sampled_from(NUMBER_FIELDS), value=st.one_of(BAD_NUMBERS, WRONG_TYPES),
       chip=st.sampled_from(["toy", "goban"]))
def test_generated_bad_overrides(field, value, chip, capsys):
    field = field.replace("balls.0.", "balls.")
    code, out, err = run(capsys, ["chips", "show", chip, "--set", f"{field}={toml_value(value)}"])
    plausible = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                 and value >= 0)
    if code == 0 and plausible:  # a large or zero value some field allows
        assert "hash:" in out and err == ""
        return
    assert_one_line(code, err)
    assert "--set" in err


# -- the items, one by one ---------------------------------------------------------------
def write(tmp_path, data: dict, name="chip.toml") -> Path:
    path = tmp_path / name
    path.write_text(to_toml(data))
    return path


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_chip_numbers_are_finite(tmp_path, capsys, value):
    for field in ("clock_mhz", "cores.op_cycles_per_element"):
        code, _, err = run(capsys, ["chips", "validate", write(tmp_path, set_path(TOY, field, value))])
        assert_one_line(code, err)
        assert f"'{field}'" in err and "finite" in err


def test_model_level_errors_name_the_fields(tmp_path, capsys):
    code, _, err = run(capsys, ["chips", "validate", write(tmp_path, set_path(GOBAN, "banks.acc_col", 40))])
    assert_one_line(code, err)
    assert "'banks.acc_col, banks.count'" in err and "'banks.acc_col': 40" in err and "'name'" not in err
    code, _, err = run(capsys, ["chips", "show", "goban", "--set", "dma.beat_bytes=48"])
    assert_one_line(code, err)
    assert "chip.dma.burst_max_bytes, chip.dma.beat_bytes" in err


def test_declared_ranges_are_enforced(tmp_path, capsys):
    code, _, err = run(capsys, ["chips", "show", "goban", "--set", "cores.count=100"])
    assert_one_line(code, err)
    assert "chip.cores.count" in err and "1..64" in err
    code, out, _ = run(capsys, ["chips", "show", "goban", "--set", "cores.count=64"])
    assert code == 0 and '"cores.count": [' in out
    # a chip without declared ranges dumps (and hashes) as before ranges existed
    code, out, _ = run(capsys, ["chips", "show", "toy"])
    assert code == 0 and "limits" not in json.loads(out.rsplit("hash:", 1)[0])
    bad = write(tmp_path, set_path(GOBAN, "limits", {"banks.nope": [1, 2]}))
    code, _, err = run(capsys, ["chips", "validate", bad])
    assert_one_line(code, err)
    assert "limits.banks.nope" in err


@pytest.mark.parametrize("formula", ["M*N*K/16 + 9**9**9**9", "M**M", "(M**64)**64", "M*N/0", "1" * 400])
def test_explosive_formulas_are_refused_at_validate(tmp_path, capsys, formula):
    code, _, err = run(capsys, ["chips", "validate", write(tmp_path, set_path(GOBAN, "balls.0.latency.ws", formula))])
    assert_one_line(code, err)
    assert "balls[0].latency.ws" in err and "matrix Ball latency.ws" in err


@pytest.mark.parametrize("argv,words", [
    (["--size", "1000000000", "16", "16"], "sizes 1..8192"),
    (["--size", "8192", "8192", "8192", "--tile", "16", "16", "16"], "tile products"),
    (["--tile", "0", "32", "32"], "sizes 1..8192"),
    (["--cores", "9"], "--cores"),
])
def test_emulate_matmul_sizes_are_bounded(capsys, argv, words):
    code, _, err = run(capsys, ["emulate-matmul", *argv])
    assert_one_line(code, err)
    assert words in err


# -- experiment specs: nothing is written for a bad one ------------------------------------
def _spec_text() -> str:
    from test_runner import SPEC

    return SPEC.format(name="gen", banks="[20]", sampler="grid", trials=5).replace('values = [1, 2, 8]', 'values = [1]')


SPEC_DATA = tomllib.loads(_spec_text())


def experiment_rows(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as con:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        return con.execute("select count(*) from experiment").fetchone()[0] if "experiment" in tables else 0


BAD_SPEC_EDITS = [
    ("search.seed", -1), ("search.seed", 2 ** 40), ("search.seed", "x"), ("search.trials", 0),
    ("search.sampler", "annealing"), ("search.max_grid", -3), ("workload.params.m", -5), ("workload.params.m", 0),
    ("workload.params.m", "big"), ("workload.params.zz", 1), ("workload.recipe", "nope"), ("baseline.chip", "nope"),
    ("baseline.chip_overrides", {"cores.count": 100}), ("baseline.chip_overrides", {"clock_mhz": math.inf}),
    ("baseline.mapping", {"workers": 0}), ("experiment.name", "has space"), ("experiment.colour", 1),
    ("objectives", []), ("objectives.0.metric", "speed"), ("space.0.values", [10 ** 9]),
    ("space.0.values", [math.nan]), ("space.0.target", "chip.banks.nope"), ("acceptance.0.expr", "latency_cycles / 0 > 1"),
    ("acceptance.0.expr", "9**9**9**9"), ("acceptance.0.expr", "speed < 1"),
]
BAD_EXPRESSIONS = st.one_of(st.sampled_from(["banks / 0 > 1", "banks ** banks ** banks > 1", "nope > 1", "banks >",
                                             "banks % 0", "(" * 200 + "banks" + ")" * 200, "'a' < banks",
                                             "banks / (workers - 1) > 0"]),
                            st.text(alphabet="bankswor /*+-()<>=0123456789", max_size=20))


@st.composite
def broken_spec(draw) -> bytes:
    kind = draw(st.sampled_from(["bytes", "edit", "constraint", "when"]))
    if kind == "bytes":
        return draw(st.binary(min_size=1, max_size=64))
    if kind == "edit":
        field, value = draw(st.sampled_from(BAD_SPEC_EDITS))
        data = set_path(SPEC_DATA, field, value)
    elif kind == "constraint":
        data = {**SPEC_DATA, "constraints": [{"expr": draw(BAD_EXPRESSIONS)}]}
    else:
        data = set_path(SPEC_DATA, "space.1.when", draw(BAD_EXPRESSIONS))
    return to_toml(data).encode("utf-8", "surrogatepass")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(content=broken_spec())
def test_generated_broken_specs_write_nothing(content, tmp_path_factory, capsys):
    tmp = tmp_path_factory.mktemp("spec")
    spec, db = tmp / "spec.toml", tmp / "s.db"
    spec.write_bytes(content)
    code, out, err = run(capsys, ["sweep", spec, "--db", db, "--no-progress"])
    if code == 0:  # the edit happened to leave a valid spec (e.g. an always-true constraint)
        return
    assert_one_line(code, err)
    assert str(spec) in err
    assert experiment_rows(db) == 0


@pytest.mark.parametrize("body,words", [
    ("def load(**p):\n    raise RuntimeError('no weights')\n\ndef inputs(**p):\n    return (torch.zeros(2, 2),)\n",
     "load(**workload.params)"),
    ("def load(**p):\n    return torch.nn.Linear(2, 2)\n\ndef inputs(**p):\n    return None\n", "inputs()"),
    ("def load(**p):\n    return 3\n\ndef inputs(**p):\n    return torch.zeros(2, 2)\n", "load()"),
    ("def load(**p):\n    return torch.nn.Linear(2, 2)\n\ndef inputs(**p):\n    raise KeyError('x')\n",
     "inputs(**workload.params)"),
])
def test_recipe_failures_are_one_line(tmp_path, capsys, body, words):
    folder = tmp_path / "myrecipe"
    folder.mkdir()
    (folder / "model.py").write_text('"""A broken recipe."""\nimport torch\n\n' + body)
    spec, db = tmp_path / "spec.toml", tmp_path / "s.db"
    spec.write_text(to_toml(set_path(set_path(SPEC_DATA, "workload.recipe", str(folder)), "workload.params", {})))
    code, out, err = run(capsys, ["sweep", spec, "--db", db, "--no-progress"])
    assert_one_line(code, err)
    assert "recipe myrecipe" in err and words in err
    assert experiment_rows(db) == 0
