"""Capacity the ISA cannot address (#19): bank rows past the row-address field are reported
as unaddressable_sram_bytes, not as private SRAM (the chip's figure, the allocation peaks of
the lowering, the model and the emulator alike), and a sweep notes it on the candidate."""

from dse.analytical import estimate, summarize
from dse.chips import capacity_notes, load_chip
from dse.mapping import Candidate, Mapping
from dse.numerics import emulate_graph
from dse.numerics.run import prepare_recipe
from dse.records import Store
from dse.runner import run_sweep


def test_rows_past_the_row_field_are_unaddressable_not_private():
    goban = load_chip("goban")  # 20 banks x 1024 rows x 16 B, a 10-bit row field
    assert goban.private_sram_bytes == 20 * 1024 * 16 and goban.unaddressable_sram_bytes == 0
    deep = load_chip("goban", {"banks.rows": 2048})
    assert deep.private_sram_bytes == 20 * 1024 * 16 and deep.unaddressable_sram_bytes == 20 * 1024 * 16
    wide = load_chip("goban", {"banks.rows": 2048, "isa.row_addr_bits": 11})
    assert wide.private_sram_bytes == 20 * 2048 * 16 and wide.unaddressable_sram_bytes == 0
    assert capacity_notes(goban) == capacity_notes(wide) == ""
    assert "327,680 B of each core's SRAM (20 banks x 1024 rows x 16 B) is unaddressable" in capacity_notes(deep)


def test_a_groups_own_deep_banks_are_noted_as_that_groups():
    groups = [{"role": "prefill", "count": 3}, {"role": "decode", "count": 2, "banks": {"count": 12, "rows": 2048}}]
    poly = load_chip("poly", {"cores.groups": groups})
    assert poly.unaddressable_sram_bytes == 0 and poly.group_chip(1).unaddressable_sram_bytes == 12 * 1024 * 16
    note = capacity_notes(poly)
    assert note.startswith("cores.groups[1].banks.rows = 2048 but the 10-bit row-address field")
    assert "196,608 B of each decode core's SRAM (12 banks x 1024 rows x 16 B) is unaddressable" in note
    assert ";" not in note  # the prefill cores' chip banks are fully addressable
    both = load_chip("poly", {"cores.groups": groups, "banks.rows": 2048})
    assert capacity_notes(both).split("; ")[0].startswith("banks.rows = 2048")
    assert "each decode core's" in capacity_notes(both).split("; ")[1]
    every = load_chip("poly", {"cores.groups": [{**g, "banks": {"rows": 1024}} for g in groups], "banks.rows": 2048})
    assert capacity_notes(every) == ""  # no core uses the chip's own deep banks


def test_the_model_and_the_emulator_count_only_addressable_rows():
    prep = prepare_recipe("gemm", {"m": 32, "n": 32, "k": 32})
    peaks = {}
    for rows in (1024, 2048):
        cand = Candidate(load_chip("goban", {"banks.rows": rows}), Mapping(workers=2))
        rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
        model = summarize(estimate(prep.graph, [cand]), [cand]).iloc[0]
        assert rep.verdict.integer_bit_exact
        assert model["peak_sram_bytes"] == rep.peak_sram_bytes
        assert model["private_sram_bytes"] == 2 * 20 * 1024 * 16
        assert model["unaddressable_sram_bytes"] == (0 if rows == 1024 else 2 * 20 * 1024 * 16)
        peaks[rows] = rep.peak_sram_bytes
    assert peaks[2048] == peaks[1024]  # the deeper rows hold nothing


SPEC = """
[experiment]
name = "deep_banks"
hypothesis = "2048-row banks hold no more than 1024-row ones behind a 10-bit row field"

[workload]
recipe = "gemm"
params = { m = 32, n = 32, k = 32 }

[baseline]
chip = "goban"

[[space]]
name = "rows"
target = "chip.banks.rows"
values = [1024, 2048]

[[objectives]]
metric = "latency_cycles"

[search]
sampler = "grid"
"""


def test_a_sweep_notes_unaddressable_capacity_on_the_candidate(tmp_path, cli):
    path = tmp_path / "deep.toml"
    path.write_text(SPEC)
    db = tmp_path / "r.db"
    result = run_sweep(path, db, progress=False)
    with Store(db) as store:
        cands = store.candidates("deep_banks").set_index("hash")
        model = store.metric_table(result.experiment_id, "analytical").set_index("hash")
    chips = {rows: Candidate(load_chip("goban", {"banks.rows": rows}), Mapping()).hash for rows in (1024, 2048)}
    assert cands.loc[chips[1024], "notes"] is None
    assert "is unaddressable, reported as unaddressable_sram_bytes" in cands.loc[chips[2048], "notes"]
    assert model.loc[chips[2048], "unaddressable_sram_bytes"] == 20 * 1024 * 16
    assert model.loc[chips[1024], "unaddressable_sram_bytes"] == 0
    assert model.loc[chips[2048], "private_sram_bytes"] == model.loc[chips[1024], "private_sram_bytes"]
    code, out, _ = cli("show", f"c{int(cands.loc[chips[2048], 'id'])}", "--db", db)
    assert code == 0 and "notes: banks.rows = 2048 but the 10-bit row-address field" in out
