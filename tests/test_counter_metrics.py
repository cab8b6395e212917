"""The emulator's counters in the store: per Ball, per bank, per DMA engine and the system
bus as metrics of the emulator's kind (scopes ball, bank, dma, bus), the emulator stage's
host time by phase (scope phase), shown by `dse compare --scope`, the report and the UI;
the counter catalogue says what each counter costs the emulator."""

from __future__ import annotations

import contextlib
import io
import urllib.request

import pytest

from emulator.counters import CATALOGUE, OVERHEAD

SPEC = """
[experiment]
name = "counters"
hypothesis = "eight banks run a small GEMM as fast as sixteen"

[workload]
recipe = "gemm"
params = { m = 16, n = 16, k = 16 }

[baseline]
chip = "toy"
mapping = { policy = "framework", double_buffer = false, workers = 1 }

[[space]]
name = "bank_count"
target = "chip.banks.count"
values = [8, 16]

[[objectives]]
metric = "latency_cycles"
direction = "minimize"

[stages]
emulator = "all"
ppa = false
host_time_repeats = 1
"""


def dse(*args) -> tuple[int, str]:
    from dse.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main([str(a) for a in args])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def store_db(tmp_path_factory):
    """Two toy candidates (16 and 8 banks) swept with the emulator: the store's path."""
    tmp = tmp_path_factory.mktemp("counters")
    spec, db = tmp / "counters.toml", tmp / "r.db"
    spec.write_text(SPEC)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DSE_CACHE_DIR", str(tmp / "cache"))
        code, out = dse("sweep", spec, "--db", db, "--no-progress")
        assert code == 0 and "candidates: 2 ok" in out
        yield db


def scoped(db, scope: str, kind: str = "emulator_cycles"):
    from dse.records import Store

    with Store(db) as store:
        table = store.metric_table("counters", kind, scope)
    return {(int(r["candidate_id"]), r.get("scope_key")): r for r in table.to_dict("records")}


def test_ball_dma_and_bus_counters_are_metrics_with_hand_checked_values(store_db):
    ball, dma, bus = (scoped(store_db, s) for s in ("ball", "dma", "bus"))
    for cid in (1, 2):
        # One 16 x 16 x 16 product on the matrix Ball: 4096 MACs, 16 x 16 x 16 / 16 + 16 x 16 cycles
        # (the toy Ball's latency); the float input quantized by one Fp2Int op of 16 x 16 / 4 cycles.
        mm = ball[(cid, "core 0 matrix")]
        assert (mm["ball_ops"], mm["ball_macs"], mm["ball_busy_cycles"]) == (1, 16 ** 3, 16 ** 3 // 16 + 16 * 16)
        assert (ball[(cid, "core 0 fp2int")]["ball_ops"], ball[(cid, "core 0 relu")]["ball_ops"]) == (1, 0)
        # In: x as float (16 x 16 x 4 B), then x as int8 and w as int8 (256 B each); out: x as
        # int8 (256 B) and y as int32 (16 x 16 x 4 B).
        d = dma[(cid, "core 0")]
        assert (d["dma_transfers_in"], d["dma_bytes_in"]) == (3, 1024 + 256 + 256)
        assert (d["dma_transfers_out"], d["dma_bytes_out"]) == (2, 256 + 1024)
        assert d["dma_busy_cycles"] > 0
        assert bus[(cid, "core 0")]["dma_bus_wait_cycles"] == 0  # one core: nothing to wait for
        # The bus carried every byte, system_bus_bytes a cycle.
        assert bus[(cid, "system_bus")]["bus_busy_cycles"] == (1536 + 1280) // 16


def test_bank_rows_are_the_emulators_own_counters_per_bank(store_db):
    import json

    from dse.records import Store

    bank = scoped(store_db, "bank")
    assert sorted(k for c, k in bank if c == 2) == sorted(f"core 0 bank {b}" for b in range(8))
    assert sum(1 for c, _ in bank if c == 1) == 16  # every bank of the chip, an idle one at 0
    with Store(store_db) as store:  # the raw counters.json the run kept, row for row
        art = store.artifacts("counters")
        ref = art[(art["name"] == "counters.json") & (art["candidate_id"] == 1)].iloc[0]
        counters = json.loads(store.artifact_path(str(ref["sha256"])).read_bytes())
    for row in counters:
        if row["name"] in ("rows_read", "rows_written") and "core" in row:
            assert bank[(1, f"core 0 bank {row['bank']}")][row["name"]] == row["value"]
    assert sum(r["rows_read"] for (c, _), r in bank.items() if c == 1) > 0


def test_host_time_by_phase_is_recorded_per_run(store_db):
    phase = scoped(store_db, "phase", "emulator_host_time")
    total = scoped(store_db, "total", "emulator_host_time")
    for cid in (1, 2):
        seconds = {p: phase[(cid, p)]["host_seconds"] for p in ("lowering", "setup", "functional", "timing", "collect",
                                                                       "checks")}
        assert all(v >= 0 for v in seconds.values()) and seconds["lowering"] > 0 and seconds["functional"] > 0
        # The phases add up to the whole candidate's time (lowering, emulation, checks).
        assert sum(seconds.values()) == pytest.approx(total[(cid, None)]["seconds"], rel=0.01, abs=0.001)


def test_compare_returns_ball_and_bank_counters(store_db):
    code, out = dse("compare", "1", "2", "--db", store_db, "--scope", "ball", "--all-metrics")
    assert code == 0
    line = next(li for li in out.splitlines() if "ball_macs" in li and "core 0 matrix" in li)
    assert line.split()[-4:] == ["4,096", "4,096", "0", "1.0000"]
    code, out = dse("compare", "1", "2", "--db", store_db, "--scope", "bank")
    # A's banks 8..15 (16 banks) against B's none (8 banks): differing rows.
    assert code == 0 and "core 0 bank 15" in out and "rows_read" in out
    code, out = dse("compare", "1", "2", "--db", store_db, "--scope", "phase", "--all-metrics")
    assert code == 0 and all(p in out for p in ("lowering", "functional", "timing"))


def test_the_report_and_the_ui_show_counters_by_scope(store_db, tmp_path):
    from dse.records import Store
    from dse.report import write_report
    from uiserver import dse_ui_thread

    with Store(store_db) as store:
        report = write_report(store, "counters", tmp_path)
    html = report.path.read_text()
    assert "Emulator counters by scope" in html
    for scope in ("ball", "bank", "dma", "bus", "phase"):
        assert f'data-scope="{scope}"' in html
    assert "core 0 matrix" in html and "core 0 relu" not in html  # an idle Ball left out
    with dse_ui_thread(str(store_db)) as base:
        page = urllib.request.urlopen(f"{base}/candidates/1", timeout=30).read().decode()
    for scope in ("ball", "bank", "dma", "bus"):
        assert f'data-scope="{scope}" data-kind="emulator_cycles"' in page
    assert 'data-scope="phase" data-kind="emulator_host_time"' in page
    assert "core 0 matrix" in page


def test_every_counter_says_its_overhead():
    assert {spec.overhead for spec in CATALOGUE.values()} <= set(OVERHEAD.values())
    assert all(spec.overhead for spec in CATALOGUE.values())
    assert CATALOGUE[("rows_read", "bank")].overhead.startswith("one integer addition per counted instruction")
    assert CATALOGUE[("cycles", "chip")].overhead.startswith("none while running")
