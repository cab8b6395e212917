"""The plan layer and the cost functions: one DMA model, equal to the emulator's charges;
stream costs vectorised over chip knobs equal to each chip's own; the model's units the
lowering's own; and the packages free of import cycles and private cross-package imports."""

from __future__ import annotations

import ast
import itertools
import random
from pathlib import Path

import numpy as np
import pytest

import emulator
from emulator import Mset, Mvin, Program, Region
from emulator.dma import burst_groups, bursts

from dse.analytical import estimate
from dse.chips import load_chip
from dse.cost import dma_cycles_for, stream_cycles
from dse.cost.stream import StreamFigures
from dse.frontend import run_pipeline
from dse.lower import lower
from dse.mapping import Candidate, Mapping
from dse.plan import Stream, StreamPiece

REPO = Path(__file__).resolve().parents[1]


def _dma_chips():
    rng = random.Random(7)
    for _ in range(12):
        yield load_chip("goban", {"dma.burst_max_bytes": rng.choice([16, 64, 256, 1024]),
                                  "dma.bursts_in_flight": rng.choice([1, 2, 4]),
                                  "dma.inflight_requests": rng.choice([1, 2, 16]),
                                  "dma.latency_cycles": rng.choice([0, 7, 100])})


def test_one_dma_model_is_the_emulators_charge():
    """Generated transfers: the chip's `dma_cycles` (what the plan and the costs use) is the
    emulator's serial latency of that MVIN, and the burst count its `dma_bursts` counter."""
    rng = random.Random(3)
    for chip in _dma_chips():
        for _ in range(6):
            col = rng.choice([1, 2, 4])
            lines = rng.randint(1, 300)
            strided = rng.random() < 0.5
            width = col * chip.banks.row_bytes
            stride = 2 * width if strided else 0
            nrows = -(-lines // col)
            image = np.zeros(max(1, nrows) * (stride or width) + 64, dtype=np.uint8)
            prog = Program([[Mset(0, col), Mvin(0, 0, lines, stride)]], {"dram": Region(0, (image.size,), "uint8")},
                           {}, dram_bytes=image.size)
            res = emulator.run(prog, chip, image, mode="serial")
            want = chip.front_end.mset_cycles + chip.dma_cycles(lines, col, strided and nrows > 1)
            assert res.cycles == want, (chip.dma, lines, col, strided)
            assert res.counters.value("dma_bursts", core=0) == int(bursts(lines, col, strided, chip.dma_burst_beats))
            last = lines - (nrows - 1) * col
            assert sum(c for c, _ in burst_groups(nrows, last, col, not strided, chip.dma_burst_beats)) \
                == int(bursts(lines, col, strided, chip.dma_burst_beats))
            # the cost model's vectorised form, from bytes
            assert int(dma_cycles_for(lines * 16, chip, col, strided)) == chip.dma_cycles(lines, col, strided)


def test_fewer_request_slots_than_bursts_in_flight_bind():
    """``min(bursts_in_flight, inflight_requests)`` bursts overlap: 8 bursts, 4 in flight
    but 2 request slots -> 4 rounds of the latency."""
    chip = load_chip("goban", {"dma.bursts_in_flight": 4, "dma.inflight_requests": 2})
    assert chip.dma_cycles(32) == 4 * chip.dma.latency_cycles + 32  # 32 beats = 8 bursts of 4 beats


def test_stream_cost_vectorised_over_chip_knobs_equals_each_chip():
    stream = Stream("int2fp", 32, 8, 1, 2, [StreamPiece(0, 64, 0, 16, 0, 1.0), StreamPiece(0, 64, 0, 16, 4096, 1.0),
                                            StreamPiece(0, 30, 0, 8, 4096, 2.0)] * 3)
    chips = [load_chip("goban", {"dma.burst_max_bytes": b, "dma.latency_cycles": lat, "front_end.mset_cycles": m})
             for b, lat, m in itertools.product((64, 256), (10, 100), (1, 3))]
    figures = StreamFigures(*(np.array(v) for v in zip(*[(c.dma_burst_beats, c.dma_parallel_bursts,
                                                           c.dma.latency_cycles, c.front_end.mset_cycles)
                                                          for c in chips])))
    for workers in (1, 2, 4):
        many = stream_cycles(chips[0], stream, workers, figures)
        assert list(many) == [stream_cycles(c, stream, workers) for c in chips]


@pytest.fixture(scope="module")
def mlp():
    return run_pipeline("mlp", {"batch": 16}, check=False).graph


def test_model_units_are_the_lowerings_and_a_batch_equals_each_candidate(mlp):
    """Candidates over DMA, bank and worker knobs: costed as one batch they get the figures
    each gets alone, and every op's unit is the one the lowering emits."""
    graph = mlp
    cands = [Candidate(load_chip("goban", {"dma.burst_max_bytes": b, "dma.latency_cycles": lat, "banks.rows": r}),
                       Mapping(workers=w, policy=p))
             for b, lat, r, w, p in itertools.product((64, 1024), (20, 400), (128, 1024), (1, 2, 4),
                                                     ("framework", "search"))]
    batch = estimate(graph, cands)
    n_ops = len(graph.ops)
    units_seen = set()
    for i, cand in enumerate(cands):
        alone = estimate(graph, [cand])
        mine = batch.iloc[i * n_ops:(i + 1) * n_ops].reset_index(drop=True)
        cols = [c for c in alone.columns if c != "candidate"]
        assert mine[cols].equals(alone[cols]), cand
        inputs = [np.zeros(graph.tensors[n].shape, dtype=graph.tensors[n].dtype) for n in graph.inputs]
        low = lower(graph, cand, inputs)
        how = {r.name: r.how for r in low.ops}
        for op, unit in zip(mine["op"], mine["unit"]):
            want = {"view": "none"}.get(how[op], how[op])
            assert unit == want, (op, unit, how[op], cand.mapping)
            units_seen.add(unit)
    assert {"matrix", "core"} <= units_seen and units_seen & {"fp2int", "int2fp"}  # both sides of the choice met


def _package_imports():
    """(importing package, imported package, imported name, file) for every import in dse/
    and emulator/ (lazy ones too)."""
    out = []
    for path in list((REPO / "dse").rglob("*.py")) + list((REPO / "emulator").rglob("*.py")):
        rel = path.relative_to(REPO).with_suffix("").parts
        mod = list(rel[:-1]) if rel[-1] == "__init__" else list(rel)
        here = mod[1] if mod[0] == "dse" and len(mod) > 1 else mod[0]
        pkg_parts = mod if rel[-1] == "__init__" else mod[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = pkg_parts[:len(pkg_parts) - (node.level - 1)]
                target = base + (node.module.split(".") if node.module else [])
            else:
                target = (node.module or "").split(".")
            if target[0] not in ("dse", "emulator"):
                continue
            there = target[1] if target[0] == "dse" and len(target) > 1 else target[0]
            for alias in node.names:
                out.append((here, there, alias.name, str(path.relative_to(REPO))))
    return out


def test_no_import_cycle_between_packages_and_no_private_names_across_them():
    imports = _package_imports()
    private = [(f, name) for here, there, name, f in imports if here != there and name.startswith("_")
               and name != "__version__"]
    assert private == []
    edges: dict[str, set[str]] = {}
    for here, there, _, _ in imports:
        if here != there:
            edges.setdefault(here, set()).add(there)

    def reaches(a, b, seen=()):
        return any(n == b or (n not in seen and reaches(n, b, seen + (n,))) for n in edges.get(a, ()))

    cycles = sorted(p for p in edges if reaches(p, p))
    assert cycles == []
    # the plan is read by the lowering and the model, and reads neither
    assert {"plan", "cost"} <= edges["lower"] and {"plan", "cost"} <= edges["analytical"]
    assert not edges["plan"] & {"lower", "analytical"} and not edges["cost"] & {"plan", "lower", "analytical"}


def test_an_infeasible_candidate_has_the_same_words_in_both_consumers(mlp):
    """Candidates the plan refuses (too few banks or rows, more workers than cores, the
    framework's tile not fitting): the model's reason is the lowering's `Infeasible`
    message, word for word."""
    from dse.analytical import summarize
    from dse.plan import Infeasible

    graph = mlp
    inputs = [np.zeros(graph.tensors[n].shape, dtype=graph.tensors[n].dtype) for n in graph.inputs]
    cands = [Candidate(load_chip("goban", {"banks.count": count, "banks.rows": rows}), Mapping(workers=w, policy=p))
             for count, rows, w, p in itertools.product((4, 6, 20), (8, 32, 1024), (1, 5), ("framework", "search"))]
    totals = summarize(estimate(graph, cands), cands)
    refused = 0
    for cand, row in zip(cands, totals.itertuples()):
        try:
            lower(graph, cand, inputs)
        except Infeasible as exc:
            refused += 1
            assert not row.feasible and row.reason == str(exc), (cand.mapping, cand.chip.banks)
        else:
            assert row.feasible and row.reason == "", (cand.mapping, cand.chip.banks, row.reason)
    assert 0 < refused < len(cands)


def test_every_unit_the_plan_names_has_one_emitter_and_one_charge():
    """The plan's units (`dse.plan.graph_plan.UNITS`) are the keys of `dse.units.UNITS`: each
    with an emitter, and a charge or a whole cost, which the lowering and the model both look up."""
    from dse.plan.graph_plan import UNITS as PLAN_UNITS
    from dse.units import UNITS

    assert set(UNITS) == set(PLAN_UNITS)
    for unit in UNITS.values():
        assert callable(unit.emit) and (unit.charge is None) != (unit.cost is None), unit.name


@pytest.mark.parametrize("recipe, params", [("mlp", {"batch": 4}), ("resnet_block", {})])
def test_the_matrix_units_are_the_plans_with_a_gemm(recipe, params):
    """`MATRIX_UNITS`, which the placement and the shared weights read, name exactly the
    plans with a GEMM shape; a hand-off reader is one of them."""
    from dse.plan.graph_plan import plan_graph
    from dse.plan.units import HANDOFF_UNITS, MATRIX_UNITS

    graph = run_pipeline(recipe, params, check=False).graph
    plans = plan_graph(graph)
    assert {p.unit for p in plans if p.gemm is not None} == {p.unit for p in plans if p.unit in MATRIX_UNITS} != set()
    assert set(HANDOFF_UNITS) <= set(MATRIX_UNITS)


@pytest.mark.parametrize("recipe, params, mapping", [
    ("mlp", {"batch": 4}, {"workers": 2}),
    ("resnet_block", {"channels": 16, "size": 8}, {"fusion": "fuse", "channels_last": True, "workers": 4}),
    ("vit_block", {"tokens": 17, "dim": 32, "heads": 2, "mlp_ratio": 2}, {"fusion": "fuse"}),
    ("mobilenet_v3", {"size": 16}, {"workers": 2}),
    ("gru_encoder", {}, {}),
])
def test_the_lowering_places_each_result_as_the_plan_lays_it_out(recipe, params, mapping):
    """`OpPlan.writes` is the lowering's result geometry: every op's output as lowered has the
    plan's shape, dtype, buffer and strides (a product's accumulator the candidate's tiles over
    the plan's padded extent); only the addresses differ, the plan placing without the
    candidate's own buffers."""
    from dse.plan.graph_plan import plan_for

    graph = run_pipeline(recipe, params, check=False).graph
    cand = Candidate(load_chip("goban"), Mapping(**mapping))
    inputs = [np.zeros(graph.tensors[n].shape, dtype=graph.tensors[n].dtype) for n in graph.inputs]
    low = lower(graph, cand, inputs)
    units = set()
    for plan in plan_for(graph, cand.mapping):
        if plan.unit in ("fused", "view"):
            continue
        out = plan.op.outputs[0]
        placed, planned = low.locs[out], plan.writes
        assert (placed.shape, placed.dtype, placed.buffer_shape, placed.strides) == \
            (planned.shape, planned.dtype, planned.buffer_shape, planned.strides), (plan.op.name, plan.unit)
        if planned.blocked is None:
            assert placed.blocked is None, plan.op.name
        else:
            got, want = placed.blocked, planned.blocked
            assert (got.batch, got.M, got.N, got.Mt * got.tm, got.Nt * got.tn) == \
                (want.batch, want.M, want.N, want.tm, want.tn), plan.op.name
        units.add(plan.unit)
    assert units & {"matrix", "conv", "grouped", "scan", "chain"}, units
