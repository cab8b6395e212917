"""The analytical stage evaluated as columns (issue 35): a batch's every figure is each
candidate's own - per-op rows equal to the candidate costed alone (Ball streams costed
once per distinct stream and DMA figures, then spread), totals equal to the pandas
reductions, metric columns equal to the per-candidate `AnalyticalResult.metrics`, PPA
columns equal to the one-candidate `assess_totals` - and the grouping helper equal to
`np.unique` of the rows."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from dse.analytical import estimate, summarize
from dse.analytical.stream_cost import distinct_rows
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping
from dse.ppa.assess import assess_totals
from dse.runner.stages import AnalyticalResult, analytical_batch, analytical_graph

# Chips whose Ball streams differ: toy and pebble have the ReLU Ball, goban's quantize
# streams on Fp2Int; DMA figures change the streams' costs, bank rows their pieces.
CHIPS = [("toy", {}), ("pebble", {"banks.count": 8}),
         ("goban", {}), ("goban", {"dma.burst_max_bytes": 64, "dma.latency_cycles": 100}),
         ("goban", {"banks.rows": 256, "banks.count": 6}), ("goban", {"banks.count": 4})]


@pytest.fixture(scope="module")
def mlp():
    return analytical_graph("mlp", {})


@pytest.fixture(scope="module")
def cands():
    chips = [load_chip(name, over) for name, over in CHIPS]
    mappings = [Mapping(workers=w, policy=p, split=s) for w, p, s in
                itertools.product((1, 2, 4), ("search", "framework"), ("rows", "cols"))]
    return [Candidate(chip, m) for chip in chips for m in mappings]


def test_a_batch_per_op_equals_each_candidate_alone(mlp, cands):
    together = estimate(mlp, cands)
    n_ops = len(mlp.ops)
    for i in range(0, len(cands), 5):  # every fifth: each costed alone, its rows the batch's
        alone = estimate(mlp, [cands[i]]).drop(columns="candidate")
        mine = together.iloc[i * n_ops:(i + 1) * n_ops].drop(columns="candidate").reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, alone, check_dtype=False)
    # the streams really were taken (and not) in this batch: both units appear
    units = set(together["unit"])
    assert {"fp2int", "relu", "matrix"} <= units and ("core" in units or "epilogue" in units)
    assert together["feasible"].any() and (~together["feasible"]).any()


def test_summarize_of_the_grid_equals_the_grouped_reductions(mlp, cands):
    per_op = estimate(mlp, cands)
    fast = summarize(per_op, cands)
    # the same rows with the candidates in reverse order (each one's ops still in order) are
    # no (candidates, ops) grid: pandas' groupby path
    n_ops = len(mlp.ops)
    blocks = np.arange(len(per_op)).reshape(len(cands), n_ops)[::-1].ravel()
    pd.testing.assert_frame_equal(summarize(per_op.iloc[blocks], cands), fast)
    assert (fast["reason"] != "").any()


@pytest.mark.parametrize("ppa", [{}, None])
def test_metric_columns_equal_each_candidates_own(mlp, cands, ppa):
    results = analytical_batch(mlp, cands, ppa_calibration=ppa)
    assert any(r.feasible for r in results) and not all(r.feasible for r in results)
    for r in results:
        assert r.columns is not None
        # the per-candidate path: the same result without the batch's columns
        own = AnalyticalResult(r.feasible, r.reason, dict(r.totals), list(r.ops), r.notes, dict(r.components))
        assert own.columns is None
        want, got = list(own.metrics()), list(r.metrics())
        assert [repr(m) for m in got] == [repr(m) for m in want]
        assert len(r.ops) == len(mlp.ops) and all(len(row) == 7 for row in r.ops)
    with_energy = [r for r in results if r.feasible and r.totals["energy_uj"] == r.totals["energy_uj"]]
    assert bool(with_energy) == (ppa is not None)
    if ppa is not None:  # components by metric, as the one-candidate PPA gives them
        r = with_energy[0]
        assert set(r.components) == {"area_mm2", "energy_uj"} and r.components["area_mm2"]
        scoped = [(m.name, m.scope_key) for m in r.metrics() if m.scope == "component"]
        assert scoped == [(metric, name) for metric, by in r.components.items() for name in by]


def test_ppa_columns_equal_one_candidate_at_a_time(mlp, cands):
    """`assess_totals` of each feasible candidate alone (the emulator stage's call) gives the
    very figures the batch's columns give it."""
    from dse.ppa.holdings import core_chips

    per_op = estimate(mlp, cands)
    totals = summarize(per_op, cands)
    results = analytical_batch(mlp, cands, ppa_calibration={})
    rows = totals.to_dict("records")
    checked = 0
    for cand, row, r in zip(cands, rows, results):
        if not row["feasible"] or checked >= 6:
            continue
        (one,) = assess_totals([cand.chip], [core_chips(cand.chip, cand.mapping)], [row],
                               [r.totals["dram_footprint_bytes"]])
        for metric, value in one.totals.items():
            assert value == r.totals[metric], metric
        assert one.components == dict(r.components)
        checked += 1
    assert checked == 6


def test_distinct_rows_equal_numpys_unique():
    rng = np.random.default_rng(5)
    for columns in ([rng.integers(-3, 4, 200), rng.integers(0, 2, 200), rng.integers(100, 103, 200)],
                    [rng.integers(0, 2**40, 50), rng.integers(0, 2**40, 50)],  # too wide for one number
                    [np.array([7, 7, 7])]):
        rows, first, which = distinct_rows(*columns)
        want, want_first, want_which = np.unique(np.stack(columns, axis=1), axis=0, return_index=True,
                                                 return_inverse=True)
        assert np.array_equal(rows, want) and np.array_equal(first, want_first)
        assert np.array_equal(which, want_which.reshape(-1))
