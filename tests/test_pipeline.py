"""One graph in ranges of ops on core groups (#19): mapping.placement = "layers" (the ranges
one request after another), "pipeline" (mapping.requests overlapped), "auto" (the model's
pick), the tensor a range hands to the next range's leading matmuls through the tile's shared
memory (mapping.handoff): emulated bit for bit, the model against the emulator, transfer
bytes computed by hand on a GEMM, the infeasible reasons (the model's and the lowering's
words alike) and the malformed knobs (one line, exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from agreement import TINY_LLAMA, prepared
from dse.analytical.placed import auto_options, bus_head_delays, estimate_layers, head_transfer_ends, resolve_auto
from dse.chips import load_chip
from dse.errors import InputError
from dse.mapping import Candidate, Mapping
from dse.mapping.candidate import mapping_from_dict
from dse.numerics.run import emulate_graph, prepare_recipe, request_inputs
from dse.runner.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
LLAMA = TINY_LLAMA
SHARED_BANK = 16384 * 16  # poly's shared bank: rows x row_bytes


@pytest.fixture(scope="module")
def gemm():
    return prepared("gemm", dict(m=32, n=64, k=64))


@pytest.fixture(scope="module")
def llama():
    return prepared("llama_prefill", LLAMA)


@pytest.fixture(scope="module")
def poly():
    return load_chip("poly")


def run(prep, chip, mapping):
    """The emulator's report and the model's totals, per-op frame and notes of one candidate."""
    cand = Candidate(chip, mapping)
    totals, per_op, notes = estimate_layers(prep.graph, [cand])
    rep = emulate_graph(prep.graph, cand, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind)
    return rep, totals.iloc[0], per_op, notes[0]


def dma(rep) -> int:
    return sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])


def test_a_gemm_hands_its_quantized_input_through_shared_memory_byte_for_byte(gemm, poly):
    # x[32, 64] fp32 -> quantize (op 0, on the 3 prefill cores) -> matmul_acc (op 1, on the 2
    # decode cores, split by columns) -> dequantize (per channel: a core op, no DMA)
    rep, t, per_op, notes = run(gemm, poly, Mapping(split="cols", placement="layers", cuts=(1,)))
    assert rep.verdict.passed and rep.verdict.integer_bit_exact
    tiles = per_op.set_index("op").loc["matmul_acc", ["tile_m", "tile_n", "tile_k"]].tolist()
    assert tiles == [16, 32, 64]  # Mt = 2 tiles of A, Nt = 2 column tiles: one a decode core
    quantize = 32 * 64 * 4 + 32 * 64  # the Fp2Int stream: fp32 in, int8 out
    handoff = 2 * 16 * 64  # the prefill cores load x_int8's 2 A tiles into shared memory, once
    matmul = 2 * (64 * 32 + 2 * 16 * 32 * 4)  # per decode core: its B tile, its 2 accumulator tiles out
    assert dma(rep) == t["dma_bytes"] == quantize + handoff + matmul == 24576
    assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"] == 2 * SHARED_BANK  # one bank a tile
    assert notes == "x_int8 to op matmul_acc's A via shared memory: 2048 bytes"
    assert rep.handoffs == [["x_int8", 1, "shared", notes]]
    assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02

    # through DRAM instead: each decode core loads A itself (the mapper then picks 16x16x64)
    rep, t, per_op, notes = run(gemm, poly, Mapping(split="cols", placement="layers", cuts=(1,), handoff="dram"))
    assert per_op.set_index("op").loc["matmul_acc", ["tile_m", "tile_n", "tile_k"]].tolist() == [16, 16, 64]
    a_loads = 2 * (2 * 16 * 64)  # per decode core, its 2 A tiles (resident across its 2 column tiles)
    matmul = 2 * (2 * 16 * 64 + 4 * 16 * 16 * 4)  # per core: 2 B tiles, 4 accumulator tiles out
    assert dma(rep) == t["dma_bytes"] == quantize + a_loads + matmul == 26624
    assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"] == 0
    assert notes == "x_int8 via DRAM (mapping.handoff = dram)"

    # pipelined, 2 requests: a set of shared banks each, twice the bytes
    rep, t, _, _ = run(gemm, poly, Mapping(split="cols", placement="pipeline", cuts=(1,), requests=2))
    assert rep.verdict.passed and rep.verdict.integer_bit_exact
    assert dma(rep) == t["dma_bytes"] == 2 * 24576
    assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"] == 2 * 2 * SHARED_BANK


def test_transfers_started_at_once_take_the_bus_as_the_emulator_places_them(poly):
    # poly: 1024-byte bursts (64 beats), 100 cycles a burst's request, one burst in flight a
    # core, a 16-byte bus: a burst holds the bus 64 cycles. Core 0's 8,192 bytes alone: 8
    # bursts of 164 cycles, the k-th on the bus over [100 + 164k, 164 + 164k).
    assert head_transfer_ends(poly, {0: (0, [512])}) == {0: 8 * 164}
    # Cores 3 and 4 each load 2,048 bytes (2 bursts), dispatched 2 instructions later. Core
    # 3's bursts fit the 100-cycle gaps core 0 leaves: [164, 228), then [328, 392). Core 4's
    # find only the 36-cycle rests of those gaps until core 3 is done: [492, 556), [656, 720).
    ends = head_transfer_ends(poly, {0: (0, [512]), 3: (2, [128]), 4: (2, [128])})
    assert ends == {0: 1312, 3: 392, 4: 720}
    # Beside its own range alone core 4 would end at 2 + 100 + 64 + 100 + 64 + 64 (core 3's
    # bursts first, then its own in the next gaps): 394; core 0's range is never delayed.
    assert head_transfer_ends(poly, {3: (2, [128]), 4: (2, [128])}) == {3: 330, 4: 394}
    assert bus_head_delays(poly, [{0: (0, [512])}, {3: (2, [128]), 4: (2, [128])}]) == [0, 720 - 394]


@pytest.mark.parametrize("m", [32, 64, 128])
@pytest.mark.parametrize("handoff", [None, "dram"], ids=["shared", "dram"])
def test_a_dma_bound_pipeline_is_modelled_within_2_percent(m, handoff, poly):
    # the GEMM's quantize (one long MVIN a core) runs beside the previous request's product,
    # whose first loads wait behind it on the bus: the model places them as the emulator does
    prep = prepare_recipe("gemm", dict(m=m, n=64, k=64))
    rep, t, _, _ = run(prep, poly, Mapping(split="cols", placement="pipeline", cuts=(1,), requests=4, handoff=handoff))
    assert rep.verdict.passed and rep.verdict.integer_bit_exact
    assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02, (t["latency_cycles"], rep.cycles)
    assert dma(rep) == t["dma_bytes"] and rep.counters["shared_bytes_used"] == t["shared_sram_bytes"]


@pytest.mark.parametrize("mapping", [
    Mapping(split="cols", placement="layers", cuts=(42,)),
    Mapping(split="cols", placement="layers", cuts=(69,), handoff="dram"),
    Mapping(split="cols", placement="pipeline", cuts=(10,), requests=3),
    Mapping(split="cols", workers=3, requests=2),
    Mapping(split="cols", placement="layers", cuts=(46,), fusion="fuse"),
], ids=["layers-42", "layers-69-dram", "pipeline-10-x3", "spmd-x2", "layers-46-in-the-fused-score-chain"])
def test_llama_in_ranges_is_bit_exact_and_the_model_follows(llama, poly, mapping):
    rep, t, _, _ = run(llama, poly, mapping)
    assert rep.feasible and t["feasible"]
    assert rep.verdict.passed and rep.verdict.integer_bit_exact and rep.verdict.outputs_bit_exact
    assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02
    assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"]
    assert rep.peak_sram_bytes == t["peak_sram_bytes"]
    if mapping.placement:  # SPMD's DMA is the plain model's (its own ~1% error); the ranges' match
        assert dma(rep) == t["dma_bytes"]
    # the asked-for SRAM: every core of the groups used (3 x 16 + 2 x 12 banks), or SPMD's 3
    banks = 3 * 16 + 2 * 12 if mapping.placement else 3 * 16
    assert t["private_sram_bytes"] == banks * 16384


def test_a_pipeline_overlaps_the_requests_that_layers_run_one_after_another(llama, poly):
    layers, tl, _, _ = run(llama, poly, Mapping(split="cols", placement="layers", cuts=(42,), requests=3))
    pipe, tp, _, _ = run(llama, poly, Mapping(split="cols", placement="pipeline", cuts=(42,), requests=3))
    assert pipe.verdict.passed and layers.verdict.passed
    assert pipe.cycles < 0.95 * layers.cycles and tp["latency_cycles"] < tl["latency_cycles"]
    assert dma(pipe) == dma(layers)  # the same work, overlapped
    # one request's range alone: the slots of the pipeline are no shorter than the longer range
    one, t1, _, _ = run(llama, poly, Mapping(split="cols", placement="layers", cuts=(42,)))
    assert pipe.cycles > 2 * one.cycles


def test_every_request_computes_its_own_values(llama):
    # request k's inputs are rotated by k: a request reading another's tensors would differ
    xs = request_inputs(llama.inputs, 3)
    assert xs[0][0] is llama.inputs[0]
    assert torch.equal(xs[2][0], torch.roll(torch.as_tensor(llama.inputs[0]), 2, dims=-1))
    refs = [llama.graph.trace(*x) for x in xs]
    out = llama.graph.outputs[0]
    assert not torch.equal(refs[0][out], refs[1][out]) and not torch.equal(refs[1][out], refs[2][out])


def test_auto_takes_the_fastest_modelled_option_and_the_emulator_runs_it(gemm, llama, poly):
    cand = Candidate(poly, Mapping(split="cols", workers=3, requests=2, placement="auto"))
    options = auto_options(gemm.graph, cand)  # SPMD, then a cut before the GEMM, one after another or pipelined
    assert [(m.placement, m.cuts, m.requests) for m in options] == [(None, None, 2), ("layers", (1,), 2),
                                                                     ("pipeline", (1,), 2)]
    totals, _, _ = estimate_layers(gemm.graph, [Candidate(poly, m) for m in options])
    latency = totals["latency_cycles"].tolist()
    assert latency[2] < latency[1] < latency[0]  # overlapped < one after another < 3 prefill cores
    assert resolve_auto(gemm.graph, cand) == options[2]
    rep = emulate_graph(gemm.graph, cand, gemm.inputs, gemm.expected, gemm.tolerance, gemm.reference_kind)
    assert rep.mapping["placement"] == "pipeline" and rep.mapping["cuts"] == [1] and rep.verdict.passed
    # one request: nothing to pipeline
    one = Candidate(poly, Mapping(split="cols", workers=3, placement="auto"))
    assert {m.placement for m in auto_options(gemm.graph, one)} == {None, "layers"}
    # tiny llama: a cut before each of its 10 matrix-Ball products, the pick the fastest modelled one
    options = auto_options(llama.graph, cand)
    assert len(options) == 1 + 2 * 10
    totals, _, _ = estimate_layers(llama.graph, [Candidate(poly, m) for m in options])
    assert resolve_auto(llama.graph, cand) == options[int(np.argmin(totals["latency_cycles"].to_numpy()))]
    # on a chip without core groups, blocks of the workers; with one worker, SPMD alone
    goban = load_chip("goban")
    blocks = auto_options(gemm.graph, Candidate(goban, Mapping(workers=4, placement="auto")))
    assert blocks == [Mapping(workers=4), Mapping(workers=4, placement="layers", cuts=(1,))]
    assert auto_options(gemm.graph, Candidate(goban, Mapping(placement="auto"))) == [Mapping()]


@pytest.mark.parametrize("mapping", [Mapping(workers=4, split="cols", placement="layers", cuts=(1,)),
                                     Mapping(workers=3, split="cols", placement="pipeline", cuts=(1,), requests=3)],
                         ids=["layers-4", "pipeline-3-x3"])
def test_a_chip_without_core_groups_cuts_its_workers_into_blocks(gemm, mapping):
    goban = load_chip("goban")  # 4 identical cores in one tile
    rep, t, _, notes = run(gemm, goban, mapping)
    assert rep.verdict.passed and rep.verdict.integer_bit_exact
    assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02 and dma(rep) == t["dma_bytes"]
    assert t["workers"] == mapping.workers and notes == "x_int8 to op matmul_acc's A via shared memory: 2048 bytes"


def test_three_ranges_hand_off_one_after_another(gemm):
    # three groups: quantize | the GEMM | dequantize; the GEMM's A through shared memory, its
    # blocked accumulator to the third range through DRAM (a core op reads it first)
    three = load_chip("poly", {"cores.groups": [{"role": "a", "count": 2},
                                                {"role": "b", "count": 2, "op_cycles_per_element": 2.0},
                                                {"role": "c", "count": 1, "banks": {"count": 12}}]})
    rep, t, _, notes = run(gemm, three, Mapping(split="cols", placement="layers", cuts=(1, 2)))
    assert rep.verdict.passed and rep.verdict.integer_bit_exact
    assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02 and dma(rep) == t["dma_bytes"]
    assert [h[:3] for h in rep.handoffs] == [["x_int8", 1, "shared"], ["matmul_acc", 2, "dram"]]
    assert notes.endswith("matmul_acc via DRAM: read first by op matmul, not as A of its range's leading matmuls")
    # pipelined: the shared hand-off (its two sets of banks) or DRAM
    for handoff in (None, "dram"):
        rep, t, _, notes = run(gemm, three, Mapping(split="cols", placement="pipeline", cuts=(1, 2), requests=3,
                                                    handoff=handoff))
        assert rep.verdict.passed and rep.verdict.integer_bit_exact
        assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02 and dma(rep) == t["dma_bytes"]
        # x_int8's 2 A tiles (32 rows at 16) in each of 2 sets
        assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"] == (0 if handoff else 2 * 2 * SHARED_BANK)
        assert "; ".join(h[3] for h in rep.handoffs) == notes


def three_groups(**shared_memory):
    """poly's 5 cores in three groups: 2 | 2 | 1 (the last with 12 banks)."""
    return load_chip("poly", {"cores.groups": [{"role": "a", "count": 2},
                                               {"role": "b", "count": 2, "op_cycles_per_element": 2.0},
                                               {"role": "c", "count": 1, "banks": {"count": 12}}],
                              **{f"shared_memory.{k}": v for k, v in shared_memory.items()}})


def test_every_boundary_of_a_pipeline_hands_off_through_banks_of_its_own(llama):
    # tiny llama cut before op 10 (the q, k and v projections, all of A = mul_1_int8 [16, 32])
    # and op 42 (the scores, A = reshape_int8 [32, 32]) on three groups, 3 requests in flight:
    # both boundaries live at once, each matmul's A tiles in two sets of banks of its own
    chip = three_groups()
    pipe = Mapping(split="cols", placement="pipeline", cuts=(10, 42), requests=3)
    rep, t, _, notes = run(llama, chip, pipe)
    assert rep.verdict.passed and rep.verdict.integer_bit_exact and rep.verdict.outputs_bit_exact
    assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02 and dma(rep) == t["dma_bytes"]
    assert [h[:3] for h in rep.handoffs if h[2] == "shared"] == [["mul_1_int8", 1, "shared"],
                                                                  ["reshape_int8", 2, "shared"]]
    assert "; ".join(h[3] for h in rep.handoffs) == notes
    assert notes.startswith("mul_1_int8 to ops linear_acc, linear_1_acc, linear_2_acc (their A) via shared memory: "
                            "1536 bytes;")
    # q, k, v: 1 tile of 16 rows x 2 sets each, from the top bank down; the scores below them:
    # 2 tiles (M = 32 at 16 rows) x 2 sets
    assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"] == (3 * 2 + 2 * 2) * SHARED_BANK
    # through DRAM, each of group b's 2 cores loads mul_1_int8's 512 bytes for each of q, k, v
    # (the loaders load it once for each), and group c's one core loads reshape_int8's 2 x 512
    # as its loaders do: 3 requests x 3 x (2 x 512 - 512) bytes more
    dram_rep, dram_t, _, _ = run(llama, chip, pipe.model_copy(update={"handoff": "dram"}))
    assert dma(dram_rep) == dram_t["dma_bytes"] == dma(rep) + 3 * 3 * (2 * 512 - 512)

    # 3 shared banks: q's two sets fit; k, v and the scores, below the 2 banks q's A tiles hold
    # (k and v, through DRAM, hold none), do not and read DRAM, the scores' reason from the
    # lowering and the model alike
    small = three_groups(banks=3)
    rep, t, _, notes = run(llama, small, pipe)
    assert rep.verdict.passed and rep.verdict.integer_bit_exact
    assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02 and dma(rep) == t["dma_bytes"]
    assert [h[2] for h in rep.handoffs if h[0] in ("mul_1_int8", "reshape_int8")] == ["shared", "dram"]
    assert "; ".join(h[3] for h in rep.handoffs) == notes
    assert notes.startswith("mul_1_int8 to op linear_acc's A via shared memory: 512 bytes;")
    assert ("reshape_int8 via DRAM: op matmul_acc's A tiles do not fit shared memory one bank each with the whole "
            "reduction in one tile (K split, or more tiles than the shared banks B leaves beside the 2 banks the "
            "A tiles of the hand-offs before it hold)") in notes
    assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"] == 2 * SHARED_BANK
    # one range after another, the boundaries meet at BARRIERs and each range's start again at
    # the top bank: q, k, v in a bank each, then the scores' 2 tiles in the same banks
    rep, t, _, notes = run(llama, small, Mapping(split="cols", placement="layers", cuts=(10, 42)))
    assert rep.verdict.passed and [h[2] for h in rep.handoffs if h[0] in ("mul_1_int8", "reshape_int8")] == \
        ["shared", "shared"]
    assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"] == 3 * SHARED_BANK
    # with one shared copy of the weights, q, k and v all take their A from shared memory, v's
    # at the top, q's lowest, so each product's B tiles (from the bottom bank up) stay clear
    # of the A banks of the products after it (`handoff_banks`)
    rep, t, _, notes = run(llama, chip, Mapping(split="cols", placement="layers", cuts=(10, 42), weights="shared"))
    assert rep.verdict.passed and rep.verdict.integer_bit_exact
    assert abs(t["latency_cycles"] / rep.cycles - 1) < 0.02 and dma(rep) == t["dma_bytes"]
    assert "; ".join(h[3] for h in rep.handoffs) == notes
    assert notes.startswith("mul_1_int8 to ops linear_acc, linear_1_acc, linear_2_acc (their A) via shared memory: "
                            "1536 bytes;")
    assert rep.counters["shared_bytes_used"] == t["shared_sram_bytes"]


def test_a_staged_workload_auto_picks_spmd_or_phase_alike_in_model_and_emulator(llama, poly):
    from dse.analytical.placed import estimate_placed, resolve_auto_stages
    from dse.numerics.run import StageWork, emulate_placed

    decode = prepare_recipe("llama_decode", {**{k: v for k, v in LLAMA.items() if k != "seq"}, "past": 15})
    stages = [StageWork(role, p.graph, p.inputs, p.expected, p.tolerance, p.reference_kind)
              for role, p in (("prefill", llama), ("decode", decode))]
    pairs = [(s.role, s.graph) for s in stages]
    auto = Candidate(poly, Mapping(split="cols", workers=3, placement="auto"))
    options = [Candidate(poly, Mapping(split="cols", workers=3)), Candidate(poly, Mapping(split="cols", placement="phase"))]
    totals, _ = estimate_placed(pairs, options + [auto])
    assert resolve_auto_stages(pairs, auto).placement == "phase"  # the faster of the two here
    assert totals["latency_cycles"].iloc[2] == totals["latency_cycles"].iloc[1] < totals["latency_cycles"].iloc[0]
    assert totals["candidate_hash"].iloc[2] == auto.hash
    rep = emulate_placed(stages, auto)
    assert rep.mapping["placement"] == "phase" and rep.verdict.passed
    # phase with one shared copy of the weights: each stage's in a region of the tile's shared
    # banks of its own (tests/test_pipeline_shared_weights.py), bit for bit
    shared = Candidate(poly, Mapping(split="cols", placement="phase", weights="shared"))
    rep, (t,) = emulate_placed(stages, shared), estimate_placed(pairs, [shared])[0].to_dict("records")
    assert rep.feasible and rep.verdict.passed and rep.counters["shared_bytes_used"] == t["shared_sram_bytes"]


def test_an_infeasible_placement_has_one_reason_from_model_and_lowering(gemm, poly):
    groups = [{k: v for k, v in g.model_dump(mode="json").items() if v is not None} for g in poly.cores.groups]
    no_matrix = load_chip("poly", {"cores.groups": [groups[0], {**groups[1], "balls": ["vecmatmul", "fp2int"]}]})
    cases = [
        (no_matrix, Mapping(placement="layers", cuts=(1,)),
         "stage decode[1:3] on cores 3-4 (poly.decode): op matmul_acc: chip poly.decode has no matrix Ball"),
        (load_chip("poly", {"cores.tile_size": 3}), Mapping(placement="pipeline", cuts=(1,), requests=2),
         "placement \"pipeline\" orders its ranges with BARRIERs, which join the cores of one tile"),
        (load_chip("goban"), Mapping(placement="layers", cuts=(1,)),
         "placement \"layers\" on chip goban, which has no core groups, puts its 2 ranges on blocks of "
         "mapping.workers = 1 cores; allowed: 2 to 4 workers"),
        (poly, Mapping(placement="layers", cuts=(1, 2)), "chip poly has 2 core groups; allowed: at most 2 ranges"),
        (poly, Mapping(placement="layers", cuts=(5,)), "mapping.cuts = [5]: allowed increasing op indices in 1..2"),
    ]
    for chip, mapping, words in cases:
        rep, t, _, _ = run(gemm, chip, mapping)
        assert not rep.feasible and not t["feasible"]
        assert rep.reason == t["reason"] and words in rep.reason, (rep.reason, t["reason"])


@pytest.mark.parametrize("data, field, allowed", [
    ({"placement": "layers"}, "mapping.cuts", "placement = layers with cuts"),
    ({"placement": "pipeline", "cuts": [3]}, "mapping.requests", "requests >= 2"),
    ({"placement": "layers", "cuts": [9, 3]}, "mapping.cuts", "increasing order"),
    ({"placement": "layers", "cuts": [0]}, "mapping.cuts.0", "greater than 0"),
    ({"cuts": [3]}, "mapping.cuts", "only with placement = layers or pipeline"),
    ({"placement": "layers", "cuts": [3], "handoff": "l2"}, "mapping.handoff", "'shared' or 'dram'"),
    ({"handoff": "dram"}, "mapping.handoff", "only with placement = layers, pipeline or auto"),
    ({"placement": "phase", "requests": 2}, "mapping.requests", "a workload of stages runs once"),
    ({"placement": "pipelined"}, "mapping.placement", "'pipeline'"),
])
def test_a_malformed_placement_knob_names_field_value_and_what_is_allowed(data, field, allowed):
    with pytest.raises(InputError) as exc:
        mapping_from_dict(data, "spec.toml")
    assert exc.value.field == field and allowed in exc.value.allowed and "spec.toml" in str(exc.value)


def test_the_shipped_spec_loads_and_a_bad_cut_in_it_is_one_line_exit_2(tmp_path):
    spec = ROOT / "experiments" / "pipeline.toml"
    loaded = load_spec(spec)
    picks = [p for p, _ in loaded.hand]
    assert {"mapping.placement": "pipeline", "mapping.cuts": [42], "mapping.handoff": "dram"} in picks
    bad = tmp_path / "bad.toml"
    bad.write_text(spec.read_text().replace('"mapping.cuts" = [42] }', '"mapping.cuts" = [42, 10] }', 1))
    proc = subprocess.run([sys.executable, "-m", "dse", "sweep", str(bad), "--db", str(tmp_path / "r.db")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "mapping.cuts" in lines[0] and "increasing order" in lines[0]
    assert not (tmp_path / "r.db").exists()
