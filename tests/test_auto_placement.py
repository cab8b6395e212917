"""``mapping.placement = "auto"`` costs only the options that can win (`resolve_auto`, pruned
by `latency_bounds`), and picks what costing every option in full picks (`auto_latencies`):
on the shipped spec's auto candidate (experiments/pipeline.toml) and on small variations of
it (one request, DRAM hand-off, fusion, a chip without core groups, a GEMM)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.analytical import placed
from dse.analytical.placed import auto_latencies, auto_options, latency_bounds, resolve_auto
from dse.chips import load_chip
from dse.mapping import Candidate
from dse.mapping.candidate import mapping_from_dict
from dse.runner.spec import load_spec
from dse.runner.stages import analytical_graph

ROOT = Path(__file__).resolve().parents[1]


def shipped_auto():
    """The auto candidate of experiments/pipeline.toml: its graph, chip and mapping."""
    spec = load_spec(ROOT / "experiments" / "pipeline.toml")
    m = spec.model
    (auto,) = [c for c in m.candidates if c.set.get("mapping.placement") == "auto"]
    mapping = mapping_from_dict({**m.baseline.mapping, "placement": "auto"})
    return analytical_graph(m.workload.recipe, m.workload.params), load_chip(m.baseline.chip), mapping


def cases():
    graph, poly, mapping = shipped_auto()
    gemm = analytical_graph("gemm", dict(m=32, n=64, k=64))
    goban = load_chip("goban")
    m = mapping.model_dump(exclude_none=True)
    return [
        ("pipeline.toml", graph, poly, mapping),
        ("one-request", graph, poly, mapping_from_dict({**m, "requests": 1})),
        ("dram-handoff", graph, poly, mapping_from_dict({**m, "handoff": "dram"})),
        ("fused", graph, poly, mapping_from_dict({**m, "fusion": "fuse"})),
        ("goban-blocks", graph, goban, mapping_from_dict({**m, "workers": 4})),
        ("gemm", gemm, poly, mapping_from_dict({**m, "requests": 2})),
    ]


@pytest.fixture(scope="module")
def all_cases():
    return cases()


@pytest.mark.parametrize("index", range(6), ids=["pipeline.toml", "one-request", "dram-handoff", "fused",
                                                  "goban-blocks", "gemm"])
def test_auto_picks_what_costing_every_option_picks(all_cases, index):
    _, graph, chip, mapping = all_cases[index]
    cand = Candidate(chip, mapping)
    options = auto_options(graph, cand)
    exact = auto_latencies(graph, cand)
    bounds = latency_bounds(graph, chip, options)
    # every bound is a bound: no option is faster than its bound says
    assert all(b <= e * (1 + 1e-12) for b, e in zip(bounds, exact)), list(zip(bounds, exact))
    old = options[int(np.argmin(exact))] if np.isfinite(exact).any() else options[0]
    placed._AUTO.clear()
    assert resolve_auto(graph, cand) == old
    assert resolve_auto(graph, cand) is resolve_auto(graph, cand)  # once per process


def test_the_shipped_pick_costs_a_few_options_in_full(all_cases, monkeypatch):
    # the pruning is what makes auto cheap: count the options costed in full
    _, graph, chip, mapping = all_cases[0]
    costed = []
    real = placed.estimate_layers
    monkeypatch.setattr(placed, "estimate_layers", lambda g, cands, *a: costed.extend(cands) or real(g, cands, *a))
    placed._AUTO.clear()
    pick = resolve_auto(graph, Candidate(chip, mapping))
    options = auto_options(graph, Candidate(chip, mapping))
    assert len(options) == 21 and pick.placement == "pipeline" and pick.cuts == (10,)  # the bench's auto pick
    assert pick in [c.mapping for c in costed] and len(costed) < len(options) // 2, len(costed)
