"""The matrix Ball's `timing = "systolic"`: SCALE-Sim's compute cycles, exactly.

`dse.cost.systolic_gemm_cycles` (= `emulator.balls.systolic_cycles`) is checked
against SCALE-Sim v3 itself (the `scalesim` package, a test dependency in
requirements.txt) over shapes smaller and larger than the array, odd shapes, square and
non-square arrays and the three dataflows: its compute cycles are its "Total Cycles" minus
its "Stall Cycles", run with SRAMs and bandwidths so large that nothing stalls. Under
``CI=true`` a missing `scalesim` fails; elsewhere those tests skip.

Then: a chip whose matrix Ball has `timing = "systolic"` gives the same matrix-op cycles in
the cost model and in the emulator, and a formula-timed Ball refuses the `is` dataflow in both.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import os
import tomllib
from pathlib import Path

import numpy as np
import pytest

from dse.cost import ball_cycles, systolic_gemm_cycles
from dse.plan import plan_matmul
from dse.mapping import Candidate, MatmulShape
from dse.mapping.candidate import Mapping
from dse.mapping.params import CandidateArrays
from emulator import Matmul, Mset, Program, run
from emulator.chip import chip_from_dict
from emulator.errors import ExecutionError

CONFIGS = Path(__file__).resolve().parents[1] / "chip_configs"

SCALESIM_CFG = """[general]
run_name = dse_systolic

[run_presets]
InterfaceBandwidth = USER
UseRamulatorTrace = False

[architecture_presets]
ArrayHeight = {rows}
ArrayWidth = {cols}
IfmapSramSzkB = 65536
FilterSramSzkB = 65536
OfmapSramSzkB = 65536
IfmapOffset = 0
FilterOffset = 10000000
OfmapOffset = 20000000
Bandwidth = 4096
Dataflow = {dataflow}
ReadRequestBuffer = 32
WriteRequestBuffer = 32

[layout]
IfmapCustomLayout = False
IfmapSRAMBankBandwidth = 4096
IfmapSRAMBankNum = 1
IfmapSRAMBankPort = 2
FilterCustomLayout = False
FilterSRAMBankBandwidth = 4096
FilterSRAMBankNum = 1
FilterSRAMBankPort = 2

[sparsity]
SparsitySupport = False
"""

# (M, N, K): smaller than the array, larger, odd, one-sided, degenerate.
SHAPES = [(1, 1, 1), (5, 7, 9), (33, 17, 40), (17, 70, 13), (64, 48, 96), (3, 100, 2), (31, 5, 47), (128, 16, 16),
          (7, 33, 65), (20, 20, 20)]
# (rows, cols): square, non-square both ways, odd, a single PE.
ARRAYS = [(4, 4), (8, 32), (32, 8), (16, 16), (16, 16), (4, 4), (3, 5), (16, 16), (8, 32), (1, 1)]
CASES = [(df, *shape, *array) for df in ("ws", "os", "is") for shape, array in zip(SHAPES, ARRAYS)]


def _scalesim():
    try:
        from scalesim.scale_sim import scalesim
    except ImportError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"scalesim (a test dependency in requirements.txt) is not installed: {exc}")
        pytest.skip("scalesim is not installed (pip install -r requirements.txt)")
    return scalesim


def scalesim_compute_cycles(tmp: Path, M: int, N: int, K: int, rows: int, cols: int, dataflow: str) -> tuple[int, int]:
    """SCALE-Sim's (total cycles - stall cycles, stall cycles) of one GEMM layer."""
    scalesim = _scalesim()
    cfg, topo, layout = tmp / "scale.cfg", tmp / "gemm.csv", tmp / "layout.csv"
    cfg.write_text(SCALESIM_CFG.format(rows=rows, cols=cols, dataflow=dataflow))
    topo.write_text(f"Layer, M, N, K,\ngemm, {M}, {N}, {K},\n")
    layout.write_text("Layer,\n")  # no custom layout: an empty layout file
    with contextlib.redirect_stdout(io.StringIO()):
        sim = scalesim(save_disk_space=True, verbose=False, config=str(cfg), topology=str(topo), layout=str(layout),
                       input_type_gemm=True)
        sim.run_scale(top_path=str(tmp / "out"))
    with open(tmp / "out" / "dse_systolic" / "COMPUTE_REPORT.csv") as f:
        rows_ = [{k.strip(): v.strip() for k, v in r.items() if k} for r in csv.DictReader(f)]
    assert len(rows_) == 1
    total, stalls = int(rows_[0]["Total Cycles"]), int(rows_[0]["Stall Cycles"])
    return total - stalls, stalls


@pytest.mark.filterwarnings("ignore:Conversion of an array with ndim:DeprecationWarning")  # inside scalesim
@pytest.mark.parametrize("dataflow, M, N, K, rows, cols", CASES)
def test_systolic_gemm_cycles_equal_scalesim(tmp_path, dataflow, M, N, K, rows, cols):
    compute, stalls = scalesim_compute_cycles(tmp_path, M, N, K, rows, cols, dataflow)
    assert stalls == 0  # the config is meant never to stall
    ours = systolic_gemm_cycles(M, N, K, rows, cols, dataflow)
    assert type(ours) is int and ours == compute


def test_systolic_gemm_cycles_broadcast_over_arrays():
    M, N, K = np.array([[5], [64]]), np.array([7, 48]), 9
    got = systolic_gemm_cycles(M, N, K, 4, 8, "os")
    want = [[systolic_gemm_cycles(int(m), int(n), K, 4, 8, "os") for n in (7, 48)] for m in (5, 64)]
    assert got.shape == (2, 2) and got.tolist() == want
    with pytest.raises(ValueError, match="'ws', 'os' or 'is'"):
        systolic_gemm_cycles(1, 1, 1, 4, 4, "rs")


# ---------------------------------------------------------------------------------------
# Model and emulator alike


def toy(timing: str = "systolic", rows: int = 16, cols: int = 16):
    with open(CONFIGS / "toy.toml", "rb") as f:
        d = tomllib.load(f)
    d = copy.deepcopy(d)
    for b in d["balls"]:
        if b["kind"] == "matrix":
            b.update(timing=timing, array_rows=rows, array_cols=cols)
    return chip_from_dict(d)


def emulated_latency(chip, M: int, N: int, K: int, dataflow: str) -> int:
    """Cycles of a single Matmul (serial timing, less the three MSETs before it)."""
    prog = Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4), Matmul(0, 1, 2, M, N, K, dataflow)]], dram_bytes=64)
    base = run(Program([[Mset(0, 1), Mset(1, 1), Mset(2, 4)]], dram_bytes=64), chip, None, mode="serial").cycles
    return run(prog, chip, None, mode="serial").cycles - base


@pytest.mark.parametrize("rows, cols", [(16, 16), (8, 32), (32, 4)])
@pytest.mark.parametrize("dataflow", ["ws", "os", "is"])
def test_systolic_chip_same_matrix_cycles_in_model_and_emulator(dataflow, rows, cols):
    chip = toy(rows=rows, cols=cols)
    params = CandidateArrays.from_candidates([Candidate(chip, Mapping(dataflow=dataflow))])
    for M, N, K in [(16, 16, 16), (32, 48, 64), (48, 16, 112), (80, 64, 32)]:
        model = int(ball_cycles(params, np.array([M]), np.array([N]), np.array([K]))[0, 0])
        assert model == systolic_gemm_cycles(M, N, K, rows, cols, dataflow)
        assert emulated_latency(chip, M, N, K, dataflow) == model

    # A planned matmul's compute time is its matrix ops at the systolic latency of its tile.
    plan = plan_matmul(chip, Mapping(dataflow=dataflow), MatmulShape(64, 64, 64))
    assert plan.feasible, plan.reason
    ops = (64 // plan.tm) * (64 // plan.tn) * (64 // plan.tk)
    assert plan.compute_cycles == ops * emulated_latency(chip, plan.tm, plan.tn, plan.tk, dataflow)


def test_formula_matrix_ball_has_no_is_dataflow_in_model_or_emulator():
    chip = toy(timing="formula")
    want = "matrix Ball of chip toy has no 'is' latency formula; allowed: ws, os; or timing = systolic"
    plan = plan_matmul(chip, Mapping(dataflow="is"), MatmulShape(32, 32, 32))
    assert not plan.feasible and plan.reason == want
    with pytest.raises(ExecutionError, match=want):
        emulated_latency(chip, 32, 32, 32, "is")
    # ws and os keep their formulas
    assert plan_matmul(chip, Mapping(dataflow="os"), MatmulShape(32, 32, 32)).feasible


def test_is_dataflow_encodes_and_decodes():
    from emulator import decode, encode

    chip = toy()
    for df in ("ws", "os", "is"):
        ins = Matmul(1, 2, 3, 16, 32, 48, df, True, 1, 2, 3)
        assert decode(*encode(ins, chip), chip) == ins
    f, rs1, rs2 = encode(Matmul(1, 2, 3, 16, 32, 48, "is", True, 1, 2, 3), chip)
    # bit 36 (the ws/os bit) clear, the high dataflow bit after c_row (52 + 7)
    assert rs2 == 16 | (32 << 12) | (48 << 24) | (1 << 37) | (1 << 38) | (2 << 45) | (3 << 52) | (1 << 59)
