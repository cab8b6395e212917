"""Area, energy and power (`dse.ppa`): SRAM figures equal to CACTI run as ZigZag runs it, a
small GEMM's energy by hand from its action counts, the model's energy against the
emulator's on the calibration set, how area grows, what total SRAM counts, and bad input
(cost figures, nodes, geometries CACTI refuses, CACTI missing) as one line and exit 2 with
nothing written."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import emulator
from dse.chips import chip_hash, load_chip
from dse.mapping import Candidate, Mapping
from dse.ppa.assess import assess_totals
from dse.ppa.cacti import SramGeometry, cacti_folder, sram_figures
from dse.ppa.components import component_table
from dse.ppa.energy import C, Tables, emulator_activity
from dse.ppa.holdings import core_chips, holdings
from dse.records import Store
from emulator.programs import matmul_inputs, tiled_matmul

REPO = Path(__file__).resolve().parents[1]


# -- SRAM: CACTI ------------------------------------------------------------------------

def zigzag_cacti(tmp_path: Path, capacity: int, width: int, node_nm: int, cell: str) -> dict[str, float]:
    """CACTI run as ZigZag runs it (its CactiConfig writes the config and calls the binary
    from its folder), in a copy of that folder: its answer as the CSV CACTI writes."""
    from zigzag.cacti.cacti_master.cacti_config_creator import CactiConfig

    folder = cacti_folder()
    work = tmp_path / "cacti_master"
    (work / "self_gen").mkdir(parents=True)
    for name in ("cacti", "tech_params", "contention.dat"):
        os.symlink(folder / name, work / name)
    config = CactiConfig()
    config.baseline_config = [line.replace('"itrs-hp"', f'"{cell}"') for line in config.baseline_config]
    names = ["mem_type", "cache_size", "IO_bus_width", "ex_rd_port", "ex_wr_port", "rd_wr_port", "bank_count",
             "technology", "line_size"]
    values = ['"ram"', capacity, width * 8, 0, 0, 1, 1, node_nm / 1000, width]
    config.cacti_auto(["single", [names, values]], str(work), str(work / "self_gen" / "cache.cfg"))
    with open(work / "self_gen" / "cache.cfg.out") as f:
        header, row = list(csv.reader(f))[:2]
    return {h.strip(): v.strip() for h, v in zip(header, row)}


@pytest.mark.parametrize("capacity, width, node, cell", [(16384, 16, 22, "itrs-hp"), (4096, 16, 28, "itrs-lstp"),
                                                         (262144, 16, 22, "itrs-hp")])
def test_sram_figures_equal_cacti_run_as_zigzag_runs_it(tmp_path, capacity, width, node, cell):
    direct = zigzag_cacti(tmp_path, capacity, width, node, cell)
    ours = sram_figures(SramGeometry(capacity, width, node, cell, 360))
    assert ours.area_mm2 == float(direct["Area (mm2)"])
    assert ours.read_pj == pytest.approx(float(direct["Dynamic read energy (nJ)"]) * 1000, rel=1e-12)
    assert ours.write_pj == pytest.approx(float(direct["Dynamic write energy (nJ)"]) * 1000, rel=1e-12)
    assert ours.leakage_mw == float(direct["Standby leakage per bank(mW)"])


def test_one_default_bank_is_the_figure_measured_here():
    """Issue 30's fact: one 16 KiB bank (1024 x 128-bit rows, one read-write port, 22 nm,
    itrs-hp) is 0.0144 mm2, 4.2 pJ a read and 5.3 mW of leakage; goban's banks are those."""
    bank = component_table(load_chip("goban")).components["private_sram"]
    assert round(bank.area_mm2.value, 4) == 0.0144
    assert round(bank.actions["read"].value, 1) == 4.2
    assert round(bank.leakage_mw.value, 1) == 5.3
    assert "CACTI" in bank.area_mm2.source


def test_cacti_answers_are_kept_by_content_and_a_bad_entry_is_rerun(tmp_path, monkeypatch):
    from dse.ppa import cacti

    monkeypatch.setenv(cacti.CACHE_ENV, str(tmp_path))
    geometry = SramGeometry(8192, 16, 32, "itrs-lop", 350)
    cacti._figures.cache_clear()
    first = sram_figures(geometry)
    (entry,) = tmp_path.glob("*.json")
    cacti._figures.cache_clear()
    assert sram_figures(geometry) == first  # read back from disk
    entry.write_text("{not json")
    cacti._figures.cache_clear()
    assert sram_figures(geometry) == first  # run again, the entry rewritten
    assert entry.read_text().startswith("{")
    cacti._figures.cache_clear()


# -- a small GEMM's energy by hand ---------------------------------------------------------

def test_a_small_gemm_energy_by_hand_from_its_actions():
    """A 64 x 64 x 64 int8 GEMM in 32-tiles on one toy core: its actions counted by hand
    (MACs, bank rows, DRAM bytes), the emulator's counters equal to them, and its energy
    the sum of actions x energy an action + idle core cycles + leakage x latency."""
    chip = load_chip("toy")
    M = N = K = 64
    t = 32
    program = tiled_matmul(M, N, K, t, t, t, layout="blocked")
    _, _, dram = matmul_inputs(M, N, K, t, t, t)
    res = emulator.run(program, chip, dram)
    Mt = Nt = Kt = M // t
    macs = M * N * K
    a_rows, b_rows, c_rows = t * t // 16, t * t // 16, t * t * 4 // 16  # rows (16 B lines) of one tile
    loads = Mt * Nt * Kt * (a_rows + b_rows)  # every output tile loads its A and B tiles, every k step
    reads = Mt * Nt * Kt * (a_rows + b_rows) + Mt * Nt * (Kt - 1) * c_rows + Mt * Nt * c_rows  # Ball + MVOUT
    writes = loads + Mt * Nt * Kt * c_rows  # MVIN + the Ball's C
    dram_bytes = Mt * Nt * Kt * 2 * t * t + M * N * 4
    act = emulator_activity(res.counters)
    assert (act["macs"], act["bank_reads"], act["bank_writes"], act["dram_bytes"]) == (macs, reads, writes, dram_bytes)

    table = component_table(chip).components
    f = lambda comp, action: table[comp].actions[action].value  # noqa: E731
    cycles = res.cycles
    leak_mw = (chip.banks.count * table["private_sram"].leakage_mw.value + table["cores"].leakage_mw.value
               + table["dma"].leakage_mw.value + table["dram"].leakage_mw.value
               + sum(table[b.kind].leakage_mw.value for b in chip.balls)
               + table["dma"].extra_area_mm2.value * table["dma"].leakage_mw.value / table["dma"].area_mm2.value)
    by_hand_pj = (macs * f("matrix", "mac") + reads * f("private_sram", "read") + writes * f("private_sram", "write")
                  + dram_bytes * (f("dma", "byte") + f("dram", "byte")) + cycles * f("cores", "idle_cycle")
                  + leak_mw * cycles / chip.clock_mhz * 1e3)
    totals = {"latency_cycles": float(cycles), **act, "dma_bytes": act["dram_bytes"], "shared_sram_bytes": 0.0}
    (got,) = assess_totals([chip], [{0: chip}], [totals], [float(res.dram.size)])
    assert got.totals["energy_uj"] == pytest.approx(by_hand_pj / 1e6, rel=1e-12)
    assert got.totals["power_mw"] == pytest.approx(got.totals["energy_uj"] / (cycles / chip.clock_mhz) * 1e3)
    assert got.totals["edp"] == pytest.approx(got.totals["energy_uj"] * cycles / chip.clock_mhz)
    assert got.totals["inferences_per_joule"] == pytest.approx(1e6 / got.totals["energy_uj"])
    assert sum(got.components["energy_uj"].values()) == pytest.approx(got.totals["energy_uj"])
    assert sum(got.components["area_mm2"].values()) == pytest.approx(got.totals["area_mm2"])


def test_the_model_counts_a_gemm_op_as_the_emulator_does():
    """The analytical per-op activity of the gemm recipe's product on goban, 1 and 4
    workers: MACs of the padded operands and DRAM bytes exactly, bank rows as counted."""
    from dse.analytical import estimate
    from dse.analytical.calibration import CALIBRATION_SET
    from dse.frontend import run_pipeline
    from dse.lower import lower
    from dse.workload.recipes import instantiate, load_recipe

    params = CALIBRATION_SET["gemm"]
    graph = run_pipeline("gemm", params).graph
    _, inputs = instantiate(load_recipe("gemm"), **params)
    chip = load_chip("goban")
    for workers in (1, 4):
        cand = Candidate(chip, Mapping(workers=workers))
        per_op = estimate(graph, [cand])
        low = lower(graph, cand, inputs)
        act = emulator_activity(emulator.run(low.program, chip, low.image, functional=False).counters)
        assert per_op["ball_macs"].sum() == act["macs"] == 64 * 64 * 64
        assert per_op["dma_bytes"].sum() == act["dram_bytes"]
        assert per_op["bank_reads"].sum() == act["bank_reads"]
        assert per_op["bank_writes"].sum() == act["bank_writes"]


def test_emulator_counts_macs_of_every_matrix_op():
    chip = load_chip("goban")
    program = tiled_matmul(128, 64, 96, 32, 32, 32, cores=4)
    _, _, dram = matmul_inputs(128, 64, 96, 32, 32, 32)
    res = emulator.run(program, chip, dram, functional=False)
    per_core = [res.counters.value("ball_macs", "ball", core=c, ball="matrix") for c in range(4)]
    assert sum(per_core) == 128 * 64 * 96 and per_core == [32 * 64 * 96] * 4


# -- the model against the emulator on the calibration set -------------------------------

def test_model_and_emulator_energy_agree_on_the_calibration_set():
    """Every point of the calibration set on goban (each shipped recipe, 1 and 4 workers,
    both policies): energy within 2% (as cycles are), the actions alone within 0.5%, and
    the DRAM footprint exact (the image the lowering lays out)."""
    from dse.ppa.agreement import agreement_points, relative_error

    rows, skipped = agreement_points(load_chip("goban"))
    assert len(rows) == 36 and not skipped
    for r in rows:
        assert abs(relative_error(r["model_energy_uj"], r["emulator_energy_uj"])) < 0.02, r["label"]
        dynamic = relative_error(r["model_energy_uj"] - r["model_leakage_uj"],
                                 r["emulator_energy_uj"] - r["emulator_leakage_uj"])
        assert abs(dynamic) < 0.005, r["label"]
        for name in r["model_components"]:
            assert abs(relative_error(r["model_components"][name], r["emulator_components"][name])) < 0.02
        assert r["model_footprint"] == r["emulator_footprint"], r["label"]


# -- area and SRAM --------------------------------------------------------------------------

def _area(chip, workers=1, shared=0.0):
    cores = core_chips(chip, Mapping(workers=workers))
    (got,) = assess_totals([chip], [cores], [{"latency_cycles": 1000.0, "shared_sram_bytes": shared}], [0.0])
    return got


def test_area_grows_with_banks_and_rows():
    areas = {(banks, rows): _area(load_chip("goban", {"banks.count": banks, "banks.rows": rows})).totals["area_mm2"]
             for banks in (4, 8, 16, 20) for rows in (128, 512, 1024, 2048)}
    for (banks, rows), area in areas.items():
        for (b2, r2), a2 in areas.items():
            if (b2, r2) != (banks, rows) and b2 >= banks and r2 >= rows:
                assert a2 > area, ((banks, rows), (b2, r2))
    # more banks of the same bytes cost periphery: 16 x 512 rows against 8 x 1024
    assert areas[(16, 512)] > areas[(8, 1024)]


def test_total_sram_counts_shared_memory_and_prices_its_banks():
    chip = load_chip("goban")
    bank = chip.shared_memory.rows * chip.shared_memory.row_bytes
    without, with_shared = _area(chip, 4), _area(chip, 4, shared=3 * bank)
    assert without.totals["total_sram_bytes"] == 4 * chip.private_sram_bytes
    assert with_shared.totals["total_sram_bytes"] == 4 * chip.private_sram_bytes + 3 * bank
    shared_bank = component_table(chip).components["shared_sram"].area_mm2.value
    assert with_shared.components["area_mm2"]["shared_sram"] == pytest.approx(3 * shared_bank)
    assert "shared_sram" not in without.components["area_mm2"]
    # eight workers span two tiles: each tile holds its own copy
    assert _area(chip.model_copy(update={"cores": chip.cores.model_copy(update={"count": 8})}), 8,
                 shared=bank).totals["total_sram_bytes"] == 8 * chip.private_sram_bytes + 2 * bank


def test_defaults_leave_a_chips_identity_alone():
    goban = load_chip("goban")
    assert chip_hash(goban) == "823d7e1dafcc652b6ed365189520bb23aa9b26b06bf4cfc50fdfe57f53469b1a"
    assert chip_hash(load_chip("goban", {"technology.node_nm": 22, "costs.dram.byte_pj": 162.5})) == chip_hash(goban)
    moved = load_chip("goban", {"technology.node_nm": 28})
    assert chip_hash(moved) != chip_hash(goban)
    assert moved.model_dump(mode="json")["technology"] == {"node_nm": 28}


def test_a_given_figure_replaces_cacti_and_the_table_names_it():
    chip = load_chip("goban", {"costs.banks.area_mm2": 0.02, "costs.matrix.mac_pj": 0.5})
    table = component_table(chip).components
    assert table["private_sram"].area_mm2.value == 0.02
    assert table["private_sram"].area_mm2.source == "chip config (costs.banks.area_mm2)"
    assert "CACTI" in table["private_sram"].actions["read"].source
    assert table["matrix"].actions["mac"].value == 0.5  # given at the chip's node: not scaled


def test_logic_figures_scale_with_the_node_by_the_stated_rule():
    t22 = component_table(load_chip("goban")).components["matrix"]
    t45 = component_table(load_chip("goban", {"technology.node_nm": 45})).components["matrix"]
    assert t45.actions["mac"].value == pytest.approx(0.3)  # Horowitz's figure at its own node
    assert t22.actions["mac"].value == pytest.approx(0.3 * 22 / 45)  # energy: linear in the node
    assert t22.area_mm2.value == pytest.approx(t45.area_mm2.value * (22 / 45) ** 2)  # area: its square


# -- sweeps -----------------------------------------------------------------------------------

SPEC = """
[experiment]
name = "{name}"
hypothesis = "four small workers beat one big core at equal area"
[[acceptance]]
expr = "latency_cycles <= baseline_latency_cycles and area_mm2 <= baseline_area_mm2"
[workload]
recipe = "mlp"
params = {{ batch = 16 }}
[baseline]
chip = "goban"
mapping = {{ workers = 1 }}
[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 4]
[[space]]
name = "weights"
target = "mapping.weights"
values = ["per_worker", "shared"]
[[objectives]]
metric = "latency_cycles"
[[objectives]]
metric = "energy_uj"
[search]
sampler = "grid"
[stages]
emulator = "{emulator}"
host_time_repeats = 1
{extra}
"""


def write_spec(tmp_path, name="ppa", emulator="all", extra="") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(SPEC.format(name=name, emulator=emulator, extra=extra))
    return path


def test_a_sweep_records_ppa_of_both_kinds_and_they_agree(tmp_path):
    from dse.runner import run_sweep

    db = tmp_path / "r.db"
    run_sweep(write_spec(tmp_path), db, progress=False)
    with Store(db) as store:
        model = store.metric_table("ppa", "analytical").set_index("candidate_id")
        emu = store.metric_table("ppa", "emulator_cycles").set_index("candidate_id")
        for cid in model.index:
            for name in ("energy_uj", "power_mw", "area_mm2"):
                assert emu.loc[cid, name] == pytest.approx(model.loc[cid, name], rel=0.02), (cid, name)
            # the DRAM image the lowering lays out, as the model foresees it
            assert emu.loc[cid, "dram_footprint_bytes"] == model.loc[cid, "dram_footprint_bytes"]
            assert emu.loc[cid, "total_sram_bytes"] == model.loc[cid, "total_sram_bytes"]
            mapping = store.candidate(int(cid))["mapping"]
            shared = model.loc[cid, "shared_sram_bytes"]
            assert (shared > 0) == (mapping.get("weights") == "shared" and mapping["workers"] > 0)
            assert model.loc[cid, "total_sram_bytes"] == model.loc[cid, "private_sram_bytes"] + shared
        runs = store.runs("ppa")
        ids = runs[runs["stage"] == "analytical"]["id"].tolist()
        comp = store.metrics("ppa", "analytical")
        for run_id in ids:
            mine = comp[comp["run_id"] == run_id]
            total = mine[(mine["scope"] == "total") & (mine["name"] == "energy_uj")]["value"].iloc[0]
            by = mine[(mine["scope"] == "component") & (mine["name"] == "energy_uj")]["value"].sum()
            per_op = mine[(mine["scope"] == "op") & (mine["name"] == "energy_uj")]["value"].sum()
            assert by == pytest.approx(total) and per_op == pytest.approx(total)


def test_ppa_can_be_turned_off(tmp_path):
    from dse.runner import run_sweep

    db = tmp_path / "r.db"
    run_sweep(write_spec(tmp_path, "off", "none", "ppa = false"), db, progress=False)
    with Store(db) as store:
        table = store.metric_table("off", "analytical")
        assert "latency_cycles" in table.columns and "energy_uj" not in table.columns


# -- bad input ------------------------------------------------------------------------------

COST_FIELDS = ["costs.banks.area_mm2", "costs.banks.read_pj", "costs.shared_memory.leakage_mw",
               "costs.matrix.mac_pj", "costs.matrix.pe_area_um2", "costs.relu.cycle_pj", "costs.core.area_mm2",
               "costs.core.idle_cycle_pj", "costs.dma.byte_pj", "costs.dram.byte_pj",
               "costs.dram.interface_area_mm2", "technology.logic_leakage_mw_per_mm2", "technology.energy_exponent"]
BAD_NUMBERS = st.one_of(st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False), st.just(float("nan")),
                        st.just(float("inf")), st.just(float("-inf")),
                        # above every field's bound (a PE's area may be up to 1e10 um2: 10,000 mm2)
                        st.floats(min_value=1e11, max_value=1e300))


def _toml_number(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(COST_FIELDS), value=BAD_NUMBERS)
def test_bad_cost_figures_are_one_line_naming_the_field(cli, tmp_path, field, value):
    section, *rest = field.split(".")
    path = tmp_path / "chip.toml"
    text = (REPO / "chip_configs" / "goban.toml").read_text()
    path.write_text(text + f"\n[{section}{'.' + '.'.join(rest[:-1]) if rest[:-1] else ''}]\n{rest[-1]} = "
                    f"{_toml_number(value)}\n")
    code, out, err = cli("chips", "validate", path)
    assert code == 2 and out == "", (field, value, out)
    line = err.strip()
    assert "\n" not in line and field in line and str(path) in line and "allowed" in line


@pytest.mark.parametrize("value", [14, 7, 130, 0])
def test_an_unknown_node_is_refused(cli, value):
    code, _, err = cli("chips", "costs", "goban", "--set", f"technology.node_nm={value}")
    assert code == 2 and "technology.node_nm" in err and "22, 28, 32, 40, 45, 65 or 90" in err


def test_a_geometry_cacti_refuses_stops_the_sweep_before_anything_is_written(cli, tmp_path):
    spec = tmp_path / "rows.toml"
    spec.write_text(SPEC.format(name="rows", emulator="none", extra="").replace(
        '[[objectives]]', '[[space]]\nname = "rows"\ntarget = "chip.banks.rows"\nvalues = [1024, 2]\n\n[[objectives]]', 1))
    db = tmp_path / "r.db"
    code, out, err = cli("sweep", spec, "--db", db)
    assert code == 2 and not db.exists()
    line = err.strip()
    assert "\n" not in line and "banks.rows" in line and "CACTI" in line and "got 2" in line


def test_cacti_missing_is_one_line_and_nothing_written(tmp_path):
    """A fake `zigzag` package first on the path (CACTI not in it), no cached answers: the
    sweep and `dse chips costs` say so in one line, exit 2, and write nothing."""
    fake = tmp_path / "site" / "zigzag"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}", "DSE_CACTI_CACHE_DIR": "off"}
    db = tmp_path / "r.db"
    for args in (["chips", "costs", "goban"], ["sweep", str(write_spec(tmp_path, emulator="none")), "--db", str(db)]):
        p = subprocess.run([sys.executable, "-m", "dse", *args], capture_output=True, text=True, env=env, cwd=tmp_path,
                           timeout=300)
        line = p.stderr.strip()
        assert p.returncode == 2 and "\n" not in line and "CACTI" in line and "costs.banks" in line, p.stderr
    assert not db.exists()


def test_chips_costs_lists_every_figure_with_its_source(cli):
    code, out, _ = cli("chips", "costs", "goban", "--json")
    import json

    table = json.loads(out)
    assert code == 0 and table["node_nm"] == 22 and table["sram_cell"] == "itrs-hp"
    named = {(r["component"], r["figure"]) for r in table["figures"]}
    for comp in ("private_sram", "shared_sram", "matrix", "fp2int", "int2fp", "transpose", "cores", "dma", "dram"):
        assert (comp, "area_mm2") in named and (comp, "leakage_mw") in named
    assert all(r["source"] for r in table["figures"])
    code, out, _ = cli("chips", "costs", "goban")
    assert code == 0 and "Horowitz ISSCC 2014" in out and "CACTI 7" in out and "assumed" in out


def test_memories_slower_than_the_clock_are_noted():
    from dse.ppa.assess import assess_totals

    def note(over):
        chip = load_chip("goban", over)
        return assess_totals([chip], [core_chips(chip, Mapping(workers=1))], [{"latency_cycles": 100.0}], [0.0])[0].note

    assert note({}) == ""
    slow = note({"technology.sram_cell": "itrs-lstp", "clock_mhz": 2000.0})
    assert "private_sram cycles in 0.664 ns" in slow and "shared_sram" not in slow  # no shared bank held


def test_dse_emulate_prints_what_the_run_cost(cli):
    code, out, _ = cli("emulate", "--chip", "goban", "--recipe", "gemm", "--param", "m=64", "--param", "n=64",
                       "--param", "k=64", "--json")
    import json

    rep = json.loads(out)
    assert code == 0 and rep["ppa"]["totals"]["energy_uj"] > 0
    assert sum(rep["ppa"]["components"]["energy_uj"].values()) == pytest.approx(rep["ppa"]["totals"]["energy_uj"])


def test_holdings_priced_together_are_each_priced_alone_to_the_bit():
    """`Tables.holdings_matrix` (a batch's distinct holdings at once) against the sum each
    holdings' area and leakage is by definition, done one holdings at a time: its cores of
    each core chip (with their banks), its shared banks and caches by tile, what a chip has
    once. Goban's SPMD cores and poly's phases (two core chips in one holdings) alike."""

    tables = Tables()

    def alone(h):
        area, leak = np.zeros(C), np.zeros(C)
        for core_chip, count in h.cores:
            (ca, cl), (ba, bl), *_ = tables._core_parts(core_chip)
            area += count * (ca + core_chip.banks.count * ba)
            leak += count * (cl + core_chip.banks.count * bl)
        _, _, (sa, sl), (xa, xl), (oa, ol) = tables._core_parts(h.chip)
        area += h.tiles * h.shared_banks * sa + h.tiles * xa + oa
        leak += h.tiles * h.shared_banks * sl + h.tiles * xl + ol
        return area, leak

    goban, poly = load_chip("goban"), load_chip("poly")
    placed = [core_chips(goban, Mapping(workers=w), 12) for w in (1, 2, 4)]
    placed += [core_chips(poly, Mapping(workers=w, placement="phase"), 12, ["prefill", "decode"]) for w in (2, 3, 5)]
    held = [holdings(chip, cores, shared) for chip, cores in zip([goban] * 3 + [poly] * 3, placed)
            for shared in (0, 1000, 10**6)]
    assert sum(len(h.cores) > 1 for h in held) >= 3  # holdings of two core chips among them
    area, leak = tables.holdings_matrix(held)
    for k, h in enumerate(held):
        a, l = alone(h)
        assert a.tobytes() == area[k].tobytes() and l.tobytes() == leak[k].tobytes() and a.sum() > 0, k


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=60), st.integers(0, 2**32 - 1))
def test_actions_priced_per_distinct_prices_are_each_priced_alone_to_the_bit(price_at, seed):
    """`priced_actions` (a batch's candidates grouped by their prices) against each candidate
    priced alone, activity after activity: the same bits whatever the batch holds, and the
    (candidate, activity, component) product it no longer builds to rounding."""
    from dse.ppa.energy import priced_actions

    rng = np.random.default_rng(seed)
    table = rng.uniform(0, 5, (4, 14, C))
    table[0] = 0
    counts = rng.integers(0, 10**7, (len(price_at), 14)).astype(np.float64)
    counts[rng.random(counts.shape) < 0.2] = 0
    at = np.array(price_at)
    got = priced_actions(counts, at, table)
    for i, p in enumerate(price_at):
        alone = priced_actions(counts[i:i + 1], at[i:i + 1], table)[0]
        by_hand = np.zeros(C)
        for a in range(14):
            by_hand += counts[i, a] * table[p, a]
        assert got[i].tobytes() == alone.tobytes() == by_hand.tobytes(), i
    np.testing.assert_allclose(got, np.einsum("na,nac->nc", counts, table[at]), rtol=1e-12)
