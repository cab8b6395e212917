"""The first-cut analytical model, checked against hand-computed cases."""

import numpy as np

from dse.analytical import estimate, summarize
from dse.cost import dma_cycles_for, matmul_cost
from dse.plan import plan_matmul
from dse.chips import load_chip
from dse.mapping import Candidate, CandidateArrays, Mapping, MatmulShape, check_tiles, framework_tiles, tile_grid
from dse.frontend import run_pipeline


def arrays(chip, mapping=Mapping()):
    return CandidateArrays.from_candidates([Candidate(chip, mapping)])


def fw_tile(chip, shape):
    return tuple(int(t[0, 0]) for t in framework_tiles(arrays(chip), shape))


def test_framework_greedy_tile_matches_the_documented_case():
    # HARDWARE.md: "A 512^3 int8 matmul gets 32 x 32 x 512 tiles."
    assert fw_tile(load_chip("toy"), MatmulShape(512, 512, 512)) == (32, 32, 512)
    # Padded to 16 first: 100 -> 112, whose multiple-of-16 divisors are 16 and 112. K and N
    # take 112; M = 112 would need 112*112/16 = 784 accumulator lines > 256, so M = 16.
    assert fw_tile(load_chip("toy"), MatmulShape(100, 100, 100)) == (16, 112, 112)
    # 256-row banks: A and B tiles cap at 256 lines, so K = 256 and N = 16.
    assert fw_tile(load_chip("toy", {"banks.rows": 256}), MatmulShape(512, 512, 512)) == (16, 16, 256)


def test_dma_cycles_by_hand():
    toy, goban = load_chip("toy"), load_chip("goban")
    # 1024 B: one 1024-B burst (100 cycles) + 64 beats of 16 B.
    assert dma_cycles_for(1024, toy) == 100 + 64
    # goban's 64-B bursts, one in flight: 16 bursts x 100 + 64 beats.
    assert dma_cycles_for(1024, goban) == 16 * 100 + 64
    two = load_chip("goban", {"dma.bursts_in_flight": 2})
    assert dma_cycles_for(1024, two) == 8 * 100 + 64
    assert list(dma_cycles_for(np.array([16, 17]), toy)) == [101, 102]


def cost_of(chip, mapping, shape, tile):
    cost = matmul_cost(arrays(chip, mapping), shape, *([t] for t in tile))
    return {k: int(np.broadcast_to(getattr(cost, k), cost.check.ok.shape)[0, 0])
            for k in ("cycles", "compute_cycles", "dma_cycles", "dma_bytes")}


def test_single_tile_matmul_cycles_by_hand():
    toy = load_chip("toy")
    c = cost_of(toy, Mapping(policy="framework", double_buffer=False), MatmulShape(16, 16, 16), (16, 16, 16))
    # A and B: 256 B each = 100 + 16; C: 16x16 int32 = 1024 B = 100 + 64; WS: 16^3/16 + 16*16.
    assert c["dma_cycles"] == 116 + 116 + 164
    assert c["compute_cycles"] == 256 + 256
    assert c["cycles"] == 116 + 116 + 164 + 512
    assert c["dma_bytes"] == 256 + 256 + 1024
    # Double buffered: max(dma, compute) plus the exposed first load and last store.
    db = cost_of(toy, Mapping(double_buffer=True), MatmulShape(16, 16, 16), (16, 16, 16))
    assert db["cycles"] == max(396, 512) + 116 + 116 + 164
    # OS dataflow: M*N/2 instead of M*N.
    os_ = cost_of(toy, Mapping(dataflow="os", double_buffer=False), MatmulShape(16, 16, 16), (16, 16, 16))
    assert os_["compute_cycles"] == 256 + 128


def test_reuse_of_resident_tiles_by_hand():
    # M=32, N=32, K=16 with 16x16x16 tiles: Kt = 1, so each A row block stays resident over
    # both column blocks (2 loads, not 4); B is reloaded for each row block (4 loads).
    c = cost_of(load_chip("toy"), Mapping(double_buffer=False), MatmulShape(32, 32, 16), (16, 16, 16))
    assert c["dma_bytes"] == 2 * 256 + 4 * 256 + 4 * 1024


def test_bank_budget_and_field_limits_are_separate_constraints():
    chip = load_chip("toy", {"banks.count": 8})
    check = check_tiles(arrays(chip, Mapping(double_buffer=True)), [16], [16], [16])
    # 2 buffers x (A 1 + B 1 + C 4 accumulator banks) = 12 banks > 8.
    assert not check.ok[0, 0] and int(check.banks[0, 0]) == 12
    assert "needs 12 banks" in check.reason(0, 0) and "chip has 8" in check.reason(0, 0)
    assert check_tiles(arrays(chip, Mapping(double_buffer=False)), [16], [16], [16]).ok[0, 0]

    # Deeper banks than the 10-bit row address can reach do not hold more rows per bank.
    deep = load_chip("toy", {"banks.rows": 2048})
    c = check_tiles(arrays(deep, Mapping(double_buffer=False)), [128], [16], [256])
    assert int(c.lines_a[0, 0]) == 2048 and int(c.banks[0, 0]) == 2 + 1 + 4

    narrow = load_chip("toy", {"isa.matrix_dim_bits": 5})  # M/N/K fields hold at most 31
    c = check_tiles(arrays(narrow, Mapping(double_buffer=False)), [16, 32], [16, 16], [16, 16])
    assert list(c.ok[0]) == [True, False] and "allows <= 31, tile needs 32" in c.reason(0, 1)


def test_search_is_the_exhaustive_best_and_beats_or_ties_the_framework():
    chip = load_chip("toy")
    shape = MatmulShape(128, 1024, 256)
    fw = plan_matmul(chip, Mapping(policy="framework", double_buffer=False), shape)
    best = plan_matmul(chip, Mapping(policy="search", double_buffer=False), shape)
    assert fw.feasible and best.feasible and best.cycles <= fw.cycles
    tm, tn, tk = tile_grid(shape)
    cost = matmul_cost(arrays(chip, Mapping(double_buffer=False)), shape, tm, tn, tk)
    ok = cost.check.ok[0]
    assert best.legal_tiles == int(ok.sum()) > 0 and not ok.all()
    assert best.cycles == int(cost.cycles[0][ok].min())


def test_infeasible_candidates_say_why():
    plan = plan_matmul(load_chip("toy", {"banks.count": 4}), Mapping(), MatmulShape(64, 64, 64))
    assert not plan.feasible and "no legal tile" in plan.reason and "chip has 4" in plan.reason
    plan = plan_matmul(load_chip("goban"), Mapping(workers=8), MatmulShape(64, 64, 64))
    assert not plan.feasible and "8 workers but chip goban has 4 cores" in plan.reason
    toy = load_chip("toy")
    plan = plan_matmul(toy.model_copy(update={"balls": toy.balls[1:]}), Mapping(), MatmulShape(64, 64, 64))
    assert not plan.feasible and "no matrix Ball" in plan.reason


def test_workers_split_output_rows_and_share_the_dram_bus():
    goban = load_chip("goban")
    shape = MatmulShape(256, 64, 64)
    one = plan_matmul(goban, Mapping(workers=1), shape)
    four = plan_matmul(goban, Mapping(workers=4), shape)
    assert four.workers_used == 4 and four.cycles < one.cycles
    # Never faster than the shared bus allows: one 16-byte beat per cycle for all workers.
    assert four.cycles >= four.dma_bytes / goban.dma.beat_bytes
    # More workers than row blocks: the extra workers idle.
    few = plan_matmul(goban, Mapping(workers=4, policy="framework"), MatmulShape(16, 64, 64))
    assert few.workers_used == 1


def test_a_batch_equals_candidates_one_at_a_time():
    graph = run_pipeline("mlp").graph  # int8 products, as the lowering gets them
    cands = [Candidate(load_chip(chip, {"banks.count": banks}), Mapping(workers=w, policy=p, double_buffer=db))
             for chip in ("toy", "goban") for banks in (4, 8, 16) for w in (1, 2)
             for p in ("search", "framework") for db in (True, False)]
    together = summarize(estimate(graph, cands), cands)
    for i, cand in enumerate(cands):
        alone = summarize(estimate(graph, [cand]), [cand]).iloc[0]
        row = together.iloc[i]
        assert row["feasible"] == alone["feasible"] and row["reason"] == alone["reason"]
        assert np.isclose(row["latency_cycles"], alone["latency_cycles"], equal_nan=True)
        assert np.isclose(row["peak_sram_bytes"], alone["peak_sram_bytes"], equal_nan=True)  # NaN: infeasible
    assert together["feasible"].any() and (~together["feasible"]).any()


def test_a_grid_of_tiles_costs_each_tile_as_costed_alone():
    # a row of tiles takes two shortcuts (the lock-step wait on the tiles of one k step only,
    # the DMA costed on one row when every candidate's is alike); one tile a candidate as a
    # column takes neither, nor does a batch whose DMA differs: the same figures all three ways
    chips = [load_chip("goban"), load_chip("goban", {"banks.count": 40}),
             load_chip("goban", {"dma.burst_max_bytes": 64, "dma.latency_cycles": 100})]
    cands = [Candidate(chip, Mapping(workers=w, split=sp))
             for chip in chips for w in (1, 3, 4) for sp in ("rows", "cols")]
    alike = CandidateArrays.from_candidates(cands[:12])  # goban's DMA only
    mixed = CandidateArrays.from_candidates(cands)
    for shape in (MatmulShape(128, 1024, 256, bias=True), MatmulShape(64, 128, 64), MatmulShape(49, 512, 4608)):
        tm, tn, tk = tile_grid(shape)
        assert (shape.padded[2] // tk == 1).any() and (shape.padded[2] // tk > 1).any()
        grid, wide = matmul_cost(alike, shape, tm, tn, tk), matmul_cost(mixed, shape, tm, tn, tk)
        for t in range(0, len(tm), 7):
            column = lambda a: np.full((alike.n, 1), a[t])  # noqa: E731
            alone = matmul_cost(alike, shape, column(tm), column(tn), column(tk))
            for name in ("cycles", "dma_cycles", "busy_cycles", "dma_bytes", "preload_cycles"):
                want = np.broadcast_to(getattr(alone, name), (alike.n, 1))[:, 0]
                assert (np.broadcast_to(getattr(grid, name), (alike.n, len(tm)))[:, t] == want).all(), (shape, t, name)
                got = np.broadcast_to(getattr(wide, name), (mixed.n, len(tm)))[:12, t]
                assert (got == want).all(), (shape, t, name)


def test_bank_rows_used_by_hand():
    """A 16^3 tile: A and B 16 rows of 16 int8 each, C 16 accumulator lines of 64 bytes, each
    one row in each of acc_col = 4 physical banks: 16 + 16 + 64 rows a buffer."""
    toy = load_chip("toy")
    one = plan_matmul(toy, Mapping(policy="framework", double_buffer=False), MatmulShape(16, 16, 16))
    two = plan_matmul(toy, Mapping(policy="framework", double_buffer=True), MatmulShape(16, 16, 16))
    assert (one.tm, one.tn, one.tk) == (16, 16, 16)
    assert one.bank_rows == 96 and two.bank_rows == 192
    # The SRAM allocated is whole banks: 1 + 1 + 4 banks a buffer, of 1024 rows x 16 bytes.
    assert one.sram_bytes == 6 * 1024 * 16 and two.sram_bytes == 12 * 1024 * 16
