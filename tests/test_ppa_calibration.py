"""PPA calibration through a real record store: a synthesis or power report imported by
component (`dse evidence import --kind synth_area|power`), a factor per component fitted
to it (`dse calibrate --evidence synth_area|power`), and the sweeps after it pricing every
component with those factors; bad tables exit 2 and write nothing."""

from __future__ import annotations

import json
import math
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dse.analytical import MODEL_VERSION
from dse.chips import load_chip
from dse.errors import InputError
from dse.ppa.calibration import PpaPoint, fit_factors
from dse.ppa.components import COMPONENTS
from dse.records import Store
from dse.records.calibrations import latest_ppa_calibration, ppa_version_ids
from dse.records.evidence import COMPONENT_LIMITS, parse_evidence

SPEC = """
[experiment]
name = "{name}"
hypothesis = "Two workers beat one for the MLP on goban"

[[acceptance]]
expr = "latency_cycles < baseline_latency_cycles"
prose = "faster than the baseline"

[workload]
recipe = "mlp"
params = {{ batch = 16 }}

[baseline]
chip = "goban"
mapping = {{ workers = 1 }}

[[space]]
name = "banks"
target = "chip.banks.count"
values = [16, 20]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 2]

[[objectives]]
metric = "latency_cycles"
"""

# The "measurements": the uncalibrated model's own figures times these (dram not measured).
AREA = {"matrix": 1.3, "private_sram": 0.9}
ENERGY = {"private_sram": 0.8, "cores": 1.1}
UNMEASURED = "dram"


def sweep(folder, db, name: str):
    from dse.runner import run_sweep

    spec = folder / f"{name}.toml"
    spec.write_text(SPEC.format(name=name))
    return run_sweep(spec, db, progress=False)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A store holding one uncalibrated sweep of the MLP on goban (4 candidates)."""
    folder = tmp_path_factory.mktemp("ppa")
    with pytest.MonkeyPatch.context() as mp:  # its own graph cache, as every test's
        mp.setenv("DSE_CACHE_DIR", str(tmp_path_factory.mktemp("graph-cache")))
        sweep(folder, folder / "base.db", "ppa-a")
    return folder / "base.db"


@pytest.fixture
def db(swept, tmp_path):
    copy = tmp_path / "records.db"
    shutil.copyfile(swept, copy)
    return copy


def figures(db, experiment: str):
    """{candidate hash: {component: (area mm2, energy uJ)}}, {hash: (candidate id, latency us)},
    and the runs' model versions, of the experiment's analytical stage."""
    with Store(db) as store:
        by = store.metric_table(experiment, "analytical", scope="component")
        totals = store.metric_table(experiment, "analytical").set_index("candidate_id")
    out: dict[str, dict] = {}
    for row in by.itertuples():
        out.setdefault(row.hash, {})[row.scope_key] = (row.area_mm2, row.energy_uj)
    clock = load_chip("goban").clock_mhz
    ids = {row.hash: (row.candidate_id, totals.loc[row.candidate_id, "latency_cycles"] / clock)
           for row in by.itertuples()}
    return out, ids, set(by["model_version"])


def write_measurements(folder, uncalibrated, ids, area=AREA, energy=ENERGY) -> dict[int, tuple]:
    """Per candidate, a synth_area CSV (in um2, with a total row) and a power JSON made of
    the uncalibrated figures times the factors."""
    files = {}
    for h, comps in uncalibrated.items():
        cid, latency_us = ids[h]
        rows = ["# from a made-up synthesis report", "component,value,unit"]
        power = {}
        for c, (a, e) in comps.items():
            if c == UNMEASURED:
                continue
            rows.append(f"{c},{a * area.get(c, 1.0) * 1e6!r},um2")
            power[c] = e * energy.get(c, 1.0) / latency_us * 1e3
        rows.append(f"total,{sum(a for a, _ in comps.values())!r},mm2")
        area_file, power_file = folder / f"area-{cid}.csv", folder / f"power-{cid}.json"
        area_file.write_text("\n".join(rows) + "\n")
        power_file.write_text(json.dumps(power))
        files[cid] = (area_file, power_file)
    return files


def counts(db) -> tuple[int, int, int]:
    with Store(db) as store:
        return len(store.runs()), len(store.artifacts()), len(store.calibrations())


def test_component_tables_round_trip(cli, db, tmp_path):
    uncalibrated, ids, _ = figures(db, "ppa-a")
    files = write_measurements(tmp_path, uncalibrated, ids)
    cid = min(files)
    area_file, power_file = files[cid]
    comps = next(v for h, v in uncalibrated.items() if ids[h][0] == cid)
    n = len(comps) - 1  # all but dram
    code, out, err = cli("evidence", "import", "--kind", "synth_area", area_file, "--candidate", cid, "--db", db)
    assert code == 0, err
    assert f"{n + 1} synth_area metrics from csv ({n} components, 1 total) for candidate {cid}" in out
    odd = tmp_path / "power.txt"  # no telling extension: --format says
    odd.write_text(power_file.read_text())
    code, out, err = cli("evidence", "import", "--kind", "power", odd, "--candidate", cid, "--format", "json",
                         "--db", db)
    assert code == 0 and f"{n} power metrics from json" in out, err
    with Store(db) as store:
        area = store.metric_table("ppa-a", "synth_area", scope="component").dropna(subset=["area_mm2"])
        power = store.metric_table("ppa-a", "power", scope="component").dropna(subset=["power_mw"])
        total = store.metric_table("ppa-a", "synth_area").set_index("candidate_id")
        runs = store.runs("ppa-a")
    assert set(area["candidate_id"]) == {cid} and set(area["scope_key"]) == set(comps) - {UNMEASURED}
    for row in area.itertuples():  # um2 read as mm2
        assert row.area_mm2 == pytest.approx(comps[row.scope_key][0] * AREA.get(row.scope_key, 1.0), rel=1e-12)
    latency_us = ids[next(h for h in ids if ids[h][0] == cid)][1]
    for row in power.itertuples():
        want = comps[row.scope_key][1] * ENERGY.get(row.scope_key, 1.0) / latency_us * 1e3
        assert row.power_mw == pytest.approx(want, rel=1e-12)
    assert total.loc[cid, "area_mm2"] == pytest.approx(sum(a for a, _ in comps.values()))
    assert list(runs[runs["stage"] == "imported"]["status"]) == ["ok", "ok"]


def test_the_fit_recovers_known_factors_and_sweeps_price_with_them(cli, db, tmp_path):
    uncalibrated, ids, versions = figures(db, "ppa-a")
    assert versions == {MODEL_VERSION}
    for cid, (area_file, power_file) in write_measurements(tmp_path, uncalibrated, ids).items():
        for kind, path in (("synth_area", area_file), ("power", power_file)):
            code, _, err = cli("evidence", "import", "--kind", kind, path, "--candidate", cid, "--db", db)
            assert code == 0, err
    fitted = {}
    for kind in ("synth_area", "power"):
        code, out, err = cli("calibrate", "--chip", "goban", "--evidence", kind, "--experiment", "ppa-a", "--db", db)
        assert code == 0, err
        assert "MAPE" in out and "-> 0.00%" in out
        with Store(db) as store:
            fitted[kind] = store.calibrations()[0]
    area, power = fitted["synth_area"], fitted["power"]
    assert area["source"] == "synth_area" and power["source"] == "power"
    for cal, known in ((area, AREA), (power, ENERGY)):
        assert set(cal["constants"]) == set(COMPONENTS)
        for c, k in cal["constants"].items():
            assert k == pytest.approx(known.get(c, 1.0), rel=1e-9), (cal["source"], c)
        assert cal["error_after"]["mape"] < 1e-6 < cal["error_before"]["mape"]
        assert cal["error_after"]["points"] == len(cal["points"]) == sum(len(v) - 1 for v in uncalibrated.values())
    assert area["constants"][UNMEASURED] == 1.0  # measured by no one: kept
    with Store(db) as store:
        assert store.latest_calibration("goban") is None  # the cycles' calibration is another thing
        merged = latest_ppa_calibration(store, "goban")
    assert merged["matrix"] == pytest.approx({"area": 1.3, "energy": 1.0})
    assert merged["private_sram"] == pytest.approx({"area": 0.9, "energy": 0.8})
    code, out, _ = cli("calibrate", "--report", "--db", db)
    assert code == 0
    assert f"calibration {area['id']} of chip goban (synth_area" in out and "measured mm2" in out
    assert f"calibration {power['id']} of chip goban (power" in out and "measured mW" in out

    # A sweep now prices every component with the factors, and says so in model_version.
    sweep(tmp_path, db, "ppa-b")
    calibrated, ids_b, versions = figures(db, "ppa-b")
    assert versions == {f"{MODEL_VERSION}+ppa-calibration-{area['id']}-{power['id']}"}
    assert ppa_version_ids(versions.pop()) == [area["id"], power["id"]]
    assert calibrated.keys() == uncalibrated.keys()
    for h, comps in calibrated.items():
        for c, (a, e) in comps.items():
            assert a == pytest.approx(uncalibrated[h][c][0] * AREA.get(c, 1.0), rel=1e-12), c
            assert e == pytest.approx(uncalibrated[h][c][1] * ENERGY.get(c, 1.0), rel=1e-12), c

    # Refitting on the calibrated experiment: the same measurements give the same factors,
    # relative to the uncalibrated model (not ~1, relative to the calibrated one).
    (tmp_path / "b").mkdir()
    for cid, (area_file, power_file) in write_measurements(tmp_path / "b", uncalibrated, ids_b).items():
        for kind, path in (("synth_area", area_file), ("power", power_file)):
            assert cli("evidence", "import", "--kind", kind, path, "--candidate", cid, "--db", db)[0] == 0
    for kind, known in (("synth_area", AREA), ("power", ENERGY)):
        code, _, err = cli("calibrate", "--chip", "goban", "--evidence", kind, "--experiment", "ppa-b", "--db", db)
        assert code == 0, err
        with Store(db) as store:
            cal = store.calibrations()[0]
        assert cal["source"] == kind
        assert cal["constants"] == pytest.approx({c: known.get(c, 1.0) for c in COMPONENTS}, rel=1e-9)
        # the model's figures fitted are the uncalibrated ones: as far off as on the first fit
        assert cal["error_before"] == pytest.approx(fitted[kind]["error_before"], rel=1e-9)


def test_cycle_and_ppa_calibrations_are_kept_apart(tmp_path):
    def add(store, source, constants):
        return store.add_calibration(chip="goban", chip_hash="0" * 64, source=source, model_version="m",
                                     emulator_version=None, constants=constants, error_before={}, error_after={},
                                     points=[])

    with Store(tmp_path / "c.db") as store:
        cycles = add(store, "emulator_cycles", {"core_scale": 1.5, "ball_scale": 1.0, "sync_cycles": 3.0})
        add(store, "synth_area", {"matrix": 2.0})
        add(store, "power", {"matrix": 0.5, "cores": 3.0})
        add(store, "synth_area", {"matrix": 1.2})  # the newest area fit replaces the area factors only
        assert store.latest_calibration("goban")["id"] == cycles
        assert latest_ppa_calibration(store, "goban") == {"matrix": {"area": 1.2, "energy": 0.5},
                                                          "cores": {"area": 1.0, "energy": 3.0}}
        assert latest_ppa_calibration(store, "toy") is None


def test_the_fit_per_component():
    pts = [PpaPoint(i, c, m * k, m) for i, m in enumerate((0.5, 2.0, 7.0)) for c, k in (("matrix", 1.3), ("dma", 0.7))]
    fit = fit_factors(pts)
    assert fit.constants["matrix"] == pytest.approx(1.3) and fit.constants["dma"] == pytest.approx(0.7)
    assert all(fit.constants[c] == 1.0 for c in COMPONENTS if c not in ("matrix", "dma"))
    assert fit.after["mape"] < 1e-9 and fit.before["points"] == 6
    # scattered measurements: the least-squares ratio on relative errors, k = sum(r) / sum(r^2)
    noisy = [PpaPoint(0, "cores", 2.0, 1.0), PpaPoint(1, "cores", 1.0, 1.0)]
    assert fit_factors(noisy).constants["cores"] == pytest.approx((0.5 + 1) / (0.25 + 1))
    with pytest.raises(ValueError):
        fit_factors([])


def test_calibrate_ppa_bad_input_exits_2_and_writes_nothing(cli, db):
    before = counts(db)
    cases = [
        (("--evidence", "synth_area"), "--experiment"),
        (("--evidence", "power", "--experiment", "nope"), "nope"),
        (("--evidence", "synth_area", "--experiment", "ppa-a"), "imported synth_area evidence"),
    ]
    for args, fragment in cases:
        code, _, err = cli("calibrate", "--chip", "goban", *args, "--db", db)
        assert code == 2 and fragment in err and err.count("\n") == 1, err
    assert counts(db) == before


# ---- bad tables, generated ------------------------------------------------------------

LIMIT = COMPONENT_LIMITS
GOOD_UNITS = {"synth_area": ("mm2", "um2"), "power": ("mW", "uW", "W")}
WRONG_UNITS = {"synth_area": ("cm2", "mm", "mW", "MM2", "pJ", "um"), "power": ("mw", "kW", "pJ", "mm2", "uJ", "MW")}
names = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz_0123456789 -."), min_size=1, max_size=12).map(str.strip)
unknown = names.filter(lambda n: n and n not in COMPONENTS and n != "total" and not n.startswith("#"))


@st.composite
def bad_table(draw):
    """(kind, file name, text, field fragment, value fragment): a table of good rows with
    one thing wrong, or a file that is no table at all."""
    kind = draw(st.sampled_from(("synth_area", "power")))
    good = draw(st.lists(st.sampled_from(COMPONENTS), min_size=0, max_size=5, unique=True))
    values = [draw(st.floats(1e-6, 10.0)) for _ in good]
    what = draw(st.sampled_from(("component", "negative", "not finite", "absurd", "unit", "empty", "no table")))
    if what == "empty":
        return kind, draw(st.sampled_from(("t.csv", "t.json", "t"))), draw(st.sampled_from(("", "\n", "  \n\t"))), \
            "FILE", "(empty)"
    if what == "no table":
        if draw(st.booleans()):
            text, field = draw(st.sampled_from((("{matrix: 1.2}", "line 1"), ('{"matrix": 1.2', "line 1"),
                                                ("[1.2, 3]", "JSON"), ("{}", "JSON"), ("3", "JSON"))))
            return kind, "report.json", text, field, text
        text = draw(st.sampled_from(("<report><area/></report>", "Total cell area: 12.5", "matrix 1.2\ncores 3",
                                     "area = 3")))
        return kind, "report.csv", text, "line 1: header", text.splitlines()[0][:20]
    as_json = draw(st.booleans()) and what != "unit"
    at = draw(st.integers(0, len(good)))
    component = draw(st.sampled_from([c for c in COMPONENTS if c not in good]))
    value: object = draw(st.floats(1e-6, 10.0))
    unit = ""
    if what == "component":
        component = draw(unknown)
    elif what == "negative":
        value = -draw(st.floats(0.0, 1e3))
    elif what == "not finite":
        value = draw(st.sampled_from((math.nan, math.inf, -math.inf)))
    elif what == "absurd":
        value = LIMIT[kind] * draw(st.floats(1.01, 1e6))
    elif what == "unit":
        unit = draw(st.sampled_from(WRONG_UNITS[kind]))
    rows = list(zip(good, values))
    rows.insert(at, (component, value))
    if as_json:
        text = json.dumps(dict(rows))  # NaN and Infinity as Python's json writes them
        where = f"key '{component}'"
        return kind, "t.json", text, where + (": component" if what == "component" else ": value"), ""
    units = [draw(st.sampled_from(("",) + GOOD_UNITS[kind])) for _ in good]
    units.insert(at, unit)
    # a value given in another unit than the kind's: the same figure, in that unit
    scale = {"um2": 1e6, "uW": 1e3, "W": 1e-3}
    lines = ["component,value,unit"] + [f"{c},{v * scale.get(u, 1.0)!r},{u}" for (c, v), u in zip(rows, units)]
    field = {"component": "component", "unit": "unit"}.get(what, "value")
    shown = {"component": component, "unit": unit}.get(what, "")
    return kind, "t.csv", "\n".join(lines) + "\n", f"line {at + 2}: {field}", shown


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(case=bad_table())
def test_bad_component_tables_exit_2_naming_file_field_and_value(cli, db, tmp_path, case):
    kind, name, text, field, value = case
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        parse_evidence(path, kind)
    message = str(caught.value)
    assert message.startswith(f"{path}: field '{field}'") and "allowed: " in message, (message, case)
    assert value in message, (message, case)
    before, evidence = counts(db), tmp_path / "records.db.evidence"
    code, _, err = cli("evidence", "import", "--kind", kind, path, "--candidate", 1, "--db", db)
    assert code == 2 and err.count("\n") == 1 and field in err, err
    assert counts(db) == before  # no run, no artifact
    assert not evidence.exists() or not any(p.is_file() for p in evidence.rglob("*"))
