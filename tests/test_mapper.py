"""The mapper (dse.plan.mapper) and `dse map`: legal tiles counted by hand, the best
tile against brute force over `matmul_cost`, the Pareto front, the framework's tile."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from dse.cost import matmul_cost
from dse.plan import gemm_shape, map_graph, map_graph_candidates, plan_matmuls, search_shape
from dse.chips import load_chip
from dse.mapping import Candidate, CandidateArrays, Mapping, MatmulShape, framework_tiles, tile_grid


def arrays(chip, mapping=Mapping()):
    return CandidateArrays.from_candidates([Candidate(chip, mapping)])


def brute_force(chip, shape, mapping=Mapping()):
    """Every grid tile through matmul_cost, one at a time: legal tiles and the best one
    (fewest cycles, then least SRAM, then grid order)."""
    p = arrays(chip, mapping)
    legal = []
    for t, tile in enumerate(zip(*tile_grid(shape))):
        cost = matmul_cost(p, shape, *([x] for x in tile))
        if cost.check.ok[0, 0]:
            legal.append((int(np.asarray(cost.cycles).ravel()[0]), int(np.asarray(cost.sram_bytes).ravel()[0]), t,
                          tuple(int(x) for x in tile)))
    return legal, (min(legal) if legal else None)


def test_legal_tiles_counted_by_hand():
    # toy with 64-row banks, a 64^3 GEMM: tiles from {16, 32, 64}^3, 27 of them. A and B
    # take ceil(rows/64) banks (tm*tk/16 rows), C takes acc_col=4 banks per 64 rows
    # (tm*tn/16 rows); double buffered, a tile needs 2 x (A + B + C) <= 16 banks: C must be
    # 4 (tm*tn <= 1024) and A + B <= 4 banks. (tm, tn) in (16,16), (16,32), (32,16), (32,32)
    # take every tk (3 each); (16,64) and (64,16) fail at tk=64 (1 + 4 banks): 4*3 + 2*2 = 16.
    chip = load_chip("toy", {"banks.rows": 64})
    shape = MatmulShape(64, 64, 64)
    s = search_shape(arrays(chip), shape)
    assert s.tiles == 27
    assert int(s.legal[0]) == 16
    legal, best = brute_force(chip, shape)
    assert len(legal) == 16
    by_hand = {(tm, tn, tk) for tm in (16, 32, 64) for tn in (16, 32, 64) for tk in (16, 32, 64)
               if tm * tn <= 1024 and sum(-(-(x * tk) // 1024) for x in (tm, tn)) <= 4}
    assert {t for *_, t in legal} == by_hand
    assert int(s.best[0]) == best[2]
    assert s.point(0, int(s.best[0])).cycles == best[0]


@pytest.mark.parametrize("chip_name, overrides, shape, mapping", [
    ("toy", {}, MatmulShape(100, 200, 300), Mapping()),
    ("goban", {}, MatmulShape(196, 256, 1152, bias=True), Mapping(workers=4)),
    ("goban", {"banks.count": 14}, MatmulShape(49, 512, 4608), Mapping(workers=2, split="cols")),
    ("goban", {}, MatmulShape(4, 64, 32, 2, b_weight=False, b_batched=True), Mapping(dataflow="os")),
    ("toy", {"banks.rows": 256}, MatmulShape(512, 512, 512), Mapping(double_buffer=False)),
])
def test_best_tile_is_the_brute_force_minimum_and_plan_matmuls_pick(chip_name, overrides, shape, mapping):
    chip = load_chip(chip_name, overrides)
    s = search_shape(arrays(chip, mapping), shape)
    legal, best = brute_force(chip, shape, mapping)
    assert int(s.legal[0]) == len(legal)
    assert int(s.best[0]) == best[2]
    plans = plan_matmuls(arrays(chip, mapping), shape)  # the search policy's own pick
    b = s.point(0, int(s.best[0]))
    assert (b.tm, b.tn, b.tk, b.cycles) == (int(plans.tm[0]), int(plans.tn[0]), int(plans.tk[0]), int(plans.cycles[0]))
    assert int(plans.legal_tiles[0]) == len(legal)


def test_front_is_non_dominated_and_holds_the_latency_best():
    chip = load_chip("goban")
    for shape in (MatmulShape(3136, 64, 576), MatmulShape(49, 512, 4608), MatmulShape(1, 1000, 512)):
        s = search_shape(arrays(chip), shape)
        ok = np.flatnonzero(s.ok(0))
        pts = {t: (int(s.cycles(0)[t]), int(s.sram_bytes(0)[t])) for t in ok}
        front = s.front(0)
        assert front and int(s.best[0]) in front
        for t in front:
            c, m = pts[t]
            assert not any(c2 <= c and m2 <= m and (c2, m2) != (c, m) for c2, m2 in pts.values())
        # and every non-dominated legal tile is on it
        for t, (c, m) in pts.items():
            if not any(c2 <= c and m2 <= m and (c2, m2) != (c, m) for c2, m2 in pts.values()):
                assert t in front


def test_framework_tile_and_cycles_are_the_frameworks():
    for chip, shape in ((load_chip("toy"), MatmulShape(512, 512, 512)),
                        (load_chip("goban"), MatmulShape(3136, 64, 576)),
                        (load_chip("toy", {"banks.rows": 256}), MatmulShape(100, 100, 100, bias=True))):
        s = search_shape(arrays(chip), shape)
        f = int(s.framework[0])
        expected = tuple(int(t[0, 0]) for t in framework_tiles(arrays(chip), shape))
        assert (int(s.tm[f]), int(s.tn[f]), int(s.tk[f])) == expected
        plans = plan_matmuls(arrays(chip, Mapping(policy="framework")), shape)
        assert bool(s.framework_ok[0]) == bool(plans.feasible[0])
        assert int(s.framework_cycles[0]) == int(plans.cycles[0])
    # HARDWARE.md's case: 512^3 int8 gets 32 x 32 x 512
    s = search_shape(arrays(load_chip("toy")), MatmulShape(512, 512, 512))
    f = int(s.framework[0])
    assert (int(s.tm[f]), int(s.tn[f]), int(s.tk[f])) == (32, 32, 512)


def _gemm_graph(M, N, K):
    op = SimpleNamespace(name="mm", kind="matmul", inputs=["x", "w"], outputs=["y"],
                         attrs={"M": M, "N": N, "K": K, "batch": 1})
    tensors = {"x": SimpleNamespace(shape=(M, K)), "w": SimpleNamespace(shape=(K, N)),
               "y": SimpleNamespace(shape=(M, N))}
    return SimpleNamespace(name="g", ops=[op], tensors=tensors, weights={"w": None})


def test_framework_failure_and_no_legal_tile_have_reasons():
    # a 6-bit M/N/K field: the greedy 32x128x128 tile breaks it, smaller tiles do not
    g = _gemm_graph(128, 128, 128)
    r = map_graph(g, Candidate(load_chip("toy", {"isa.matrix_dim_bits": 6}), Mapping()))
    o = r.ops[0]
    assert not o.framework_feasible and "matrix M/N/K field" in o.framework_reason and o.best is not None
    assert o.gap is None and r.framework_cycles is None and r.best_cycles == o.best.cycles
    assert o.best.tm <= 63 and o.best.tn <= 63 and o.best.tk <= 63
    # 10 banks: nothing fits (every tile needs 2 x (1 + 1 + 4))
    r = map_graph(g, Candidate(load_chip("toy", {"banks.count": 10}), Mapping()))
    o = r.ops[0]
    assert o.best is None and o.legal_tiles == 0 and "bank budget" in o.reason and "chip has 10" in o.reason
    assert r.unmappable == ["mm"] and r.gap is None


def test_candidates_differing_in_bank_count_share_a_row_with_the_same_answers():
    base = load_chip("goban")
    cands = [Candidate(load_chip("goban", {"banks.count": b, "banks.rows": r}), Mapping(workers=w))
             for b in (8, 12, 14, 20, 40) for r in (256, 1024) for w in (1, 4)]
    p = CandidateArrays.from_candidates(cands)
    for shape in (MatmulShape(3136, 64, 576), MatmulShape(49, 512, 4608), MatmulShape(1, 1000, 512, bias=True)):
        g = search_shape(p, shape)
        ref = search_shape(p, shape, group_by_banks=False)
        assert g.grouped and g.groups == 4 and not ref.grouped
        for k in ("best", "legal", "framework", "framework_ok", "framework_cycles"):
            assert (getattr(g, k) == getattr(ref, k)).all(), k
        # the costed figures too: the bank count reaches a tile's cost only through legality
        grouped_values, own_values = g.plan_values("search"), ref.plan_values("search")
        for k in grouped_values:
            assert (grouped_values[k] == own_values[k]).all(), k
        for c in range(p.n):
            assert g.front(c) == ref.front(c)
            assert (g.ok(c) == ref.ok(c)).all()
    assert base.banks.count == 20


def test_figures_the_search_never_reads_do_not_split_groups():
    # 1024 and 2048 rows address the same 1024 (a 10-bit row field), and the core count only
    # blocks: one group per (addressable rows, workers), the answers those of one by one
    cands = [Candidate(load_chip("goban", {"banks.count": b, "banks.rows": r, "cores.count": c}), Mapping(workers=w))
             for b in (8, 14, 20) for r in (512, 1024, 2048) for c in (2, 4, 8) for w in (1, 4)]
    p = CandidateArrays.from_candidates(cands)
    assert len(set(p.bank_rows.tolist())) == 3 and len(set(p.usable_rows.tolist())) == 2
    for shape in (MatmulShape(128, 1024, 256, bias=True), MatmulShape(49, 512, 4608)):
        g = search_shape(p, shape)
        ref = search_shape(p, shape, group_by_banks=False)
        assert g.grouped and g.groups == 4
        for k in ("best", "legal", "framework", "framework_ok", "framework_cycles"):
            assert (getattr(g, k) == getattr(ref, k)).all(), k
        assert not g.legal[p.workers > p.cores].any()  # 4 workers on 2 cores: blocked, whatever its group


def test_conv_gemm_shape_is_the_im2col_gemm():
    # channels-last (the lowering's layout) and channels-first give the same GEMM
    for layout, w_shape, out in (("HWIO", (3, 3, 64, 128), (1, 28, 28, 128)),
                                 ("OIHW", (128, 64, 3, 3), (1, 128, 28, 28))):
        op = SimpleNamespace(name="c", kind="conv2d", inputs=["x", "w", "b"], outputs=["y"],
                             attrs={"weight_layout": layout, "M": 784, "N": 128, "K": 576, "has_bias": True})
        g = SimpleNamespace(tensors={"w": SimpleNamespace(shape=w_shape), "y": SimpleNamespace(shape=out)}, weights={})
        s = gemm_shape(g, op)
        assert (s.M, s.N, s.K, s.batch, s.bias, s.b_weight) == (28 * 28, 128, 9 * 64, 1, True, True)


def test_map_graph_on_many_candidates_is_one_evaluation_per_shape():
    g = _gemm_graph(64, 64, 64)
    g.ops.append(SimpleNamespace(**{**vars(g.ops[0]), "name": "mm2"}))
    cands = [Candidate(load_chip("toy", {"banks.count": b}), Mapping()) for b in (10, 12, 16)]
    maps = map_graph_candidates(g, cands)
    assert [m.ops[0].legal_tiles for m in maps] == [0, 27, 27]
    assert all(m.distinct_shapes == 1 and len(m.ops) == 2 for m in maps)
    assert maps[2].best_cycles == 2 * maps[2].ops[0].best.cycles


def test_cli_map_prints_the_table(cli):
    code, out, err = cli("map", "--chip", "toy", "--recipe", "gemm")
    assert code == 0, err
    assert "framework tile" in out and "best tile" in out and "legal tiles" in out
    assert "matmul_acc" in out and "64 64 64" in out and "27/27" in out
    assert "totals over 1 matmul-family op(s)" in out and "mapper wall time" in out


def test_cli_map_json_and_front(cli):
    code, out, err = cli("map", "--chip", "toy", "--recipe", "gemm", "--params", "m=32", "n=48", "k=64",
                         "--objective", "front", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["recipe"] == "gemm" and data["params"] == {"m": 32, "n": 48, "k": 64}
    (op,) = data["ops"]
    assert (op["M"], op["N"], op["K"]) == (32, 48, 64)
    assert op["legal_tiles"] == op["tiles"] == 2 * 2 * 3  # 32: {16, 32}; 48: {16, 48}; 64: {16, 32, 64}
    assert op["best"] in op["front"]
    assert data["totals"]["gap"] == pytest.approx(op["framework"]["cycles"] / op["best"]["cycles"])
    assert data["mapper_seconds"] > 0
    code, out, _ = cli("map", "--chip", "toy", "--recipe", "gemm", "--params", '{"m": 32}', "--json")
    assert code == 0 and json.loads(out)["ops"][0]["M"] == 32


@pytest.mark.parametrize("args, field", [
    (["--chip", "nope", "--recipe", "gemm"], "'chip'"),
    (["--chip", "toy", "--recipe", "no_such_recipe"], "'workload.recipe'"),
    (["--chip", "toy", "--recipe", "gemm", "--objective", "fastest"], "'--objective'"),
    (["--chip", "toy", "--recipe", "gemm", "--split", "diagonal"], "'--split'"),
    (["--chip", "toy", "--recipe", "gemm", "--dataflow", "zz"], "'--dataflow'"),
    (["--chip", "toy", "--recipe", "gemm", "--workers", "2"], "'--workers'"),
    (["--chip", "toy", "--recipe", "gemm", "--params", "bogus=1"], "'workload.params'"),
    (["--chip", "toy", "--recipe", "gemm", "--params", "{bad json"], "'--params'"),
    (["--chip", "toy", "--recipe", "gemm", "--set", "banks.count=zero"], "'chip.banks.count'"),
    (["--recipe", "gemm"], "'--chip'"),
])
def test_cli_map_bad_input_exits_2_naming_the_field(cli, args, field):
    code, out, err = cli("map", *args)
    assert code == 2
    assert field in err and "allowed" in err


def test_cli_map_no_legal_tile_exits_3(cli):
    code, out, err = cli("map", "--chip", "toy", "--recipe", "gemm", "--set", "banks.count=10")
    assert code == 3
    assert "no legal tile" in out and "bank budget" in out


def test_recipe_convs_map_as_their_gemm_attrs():
    from dse.frontend import run_pipeline

    g = run_pipeline("resnet_block", dict(channels=16, size=8)).graph
    convs = [op for op in g.ops if op.kind in ("conv1d", "conv2d")]
    assert convs
    for op in convs:
        s = gemm_shape(g, op)
        assert (s.M, s.N, s.K, s.batch) == (op.attrs["M"], op.attrs["N"], op.attrs["K"], 1)
    r = map_graph(g, Candidate(load_chip("goban"), Mapping()))
    assert [o.op for o in r.ops if o.kind.startswith("conv")] == [op.name for op in convs]
    assert all(o.best is not None and o.best.cycles <= o.framework_tile_search_cycles for o in r.ops)


def test_a_candidate_with_more_workers_than_cores_is_blocked_with_a_reason():
    g = _gemm_graph(64, 64, 64)
    ok, bad = map_graph_candidates(g, [Candidate(load_chip("toy"), Mapping()),
                                       Candidate(load_chip("toy"), Mapping(workers=4))])
    assert ok.ops[0].best is not None
    assert bad.ops[0].best is None and "4 workers but chip toy has 1 cores" in bad.ops[0].reason


def test_plan_values_are_plan_matmuls_for_both_policies():
    from dse.plan import PLAN_FIELDS

    cands = [Candidate(load_chip("goban", {"banks.count": b, "banks.rows": r}), Mapping(workers=w, split=sp))
             for b in (8, 12, 20, 64) for r in (256, 1024) for w in (1, 3) for sp in ("rows", "cols")]
    fw = [Candidate(c.chip, c.mapping.model_copy(update={"policy": "framework"})) for c in cands]
    for shape in (MatmulShape(784, 128, 1152, bias=True), MatmulShape(49, 512, 4608), MatmulShape(100, 100, 100)):
        for group_by_banks in (True, False):
            s = search_shape(CandidateArrays.from_candidates(cands), shape, group_by_banks=group_by_banks)
            for policy, cs in (("search", cands), ("framework", fw)):
                values, plans = s.plan_values(policy), plan_matmuls(CandidateArrays.from_candidates(cs), shape)
                for f in PLAN_FIELDS:
                    assert (values[f] == plans.values[f]).all(), (shape, policy, f)
