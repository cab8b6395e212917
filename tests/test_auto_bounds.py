"""`latency_bounds` (what ``placement = "auto"`` prunes with) costs each handed-off matmul at
the hand-off base its plan gives it (`handoff_banks`), and every op that is not handed off
with its A from DRAM, as `estimate_layers` does: on generated cases (recipes, chips with and
without core groups, shared banks that fit every hand-off or not, requests, DRAM hand-off,
fusion) no bound exceeds the option's modelled latency, SPMD's bound is its latency less the
BARRIERs between requests, and the shipped spec's pick costs one option in full (3 with
base-0 bounds that costed every matmul at its cheaper of DRAM and shared memory)."""

from __future__ import annotations

import numpy as np
import pytest

from agreement import TINY_LLAMA
from dse.analytical import placed
from dse.analytical.placed import auto_latencies, auto_options, latency_bounds, resolve_auto
from dse.chips import load_chip
from dse.mapping import Candidate
from dse.mapping.candidate import mapping_from_dict
from dse.runner.stages import analytical_graph

LLAMA = TINY_LLAMA


def groups(banks: int):
    """poly's 5 cores in three groups, 2 | 2 | 1 (the last with 12 banks), `banks` shared banks."""
    return load_chip("poly", {"cores.groups": [{"role": "a", "count": 2},
                                               {"role": "b", "count": 2, "op_cycles_per_element": 2.0},
                                               {"role": "c", "count": 1, "banks": {"count": 12}}],
                              "shared_memory.banks": banks})


GRAPHS = {"llama": ("llama_prefill", LLAMA), "mlp": ("mlp", dict(batch=32)), "gemm": ("gemm", dict(m=32, n=64, k=64))}
# (graph, chip, mapping knobs beside placement = auto and split = cols)
CASES = [
    ("llama", "poly", dict(workers=3, requests=4)),
    ("llama", "poly-3banks", dict(workers=3, requests=3)),
    ("llama", "poly-3banks", dict(requests=1)),
    ("llama", "goban", dict(workers=4, requests=2)),
    ("llama", "poly", dict(workers=3, requests=2, handoff="dram")),
    ("mlp", "groups-4banks", dict(requests=2)),
    ("mlp", "groups-1bank", dict(requests=2)),
    ("gemm", "poly", dict(workers=3, requests=4)),
    ("gemm", "goban", dict(workers=3, requests=1)),
]


def chip_of(name: str):
    return {"poly": lambda: load_chip("poly"), "goban": lambda: load_chip("goban"),
            "poly-3banks": lambda: load_chip("poly", {"shared_memory.banks": 3}),
            "groups-4banks": lambda: groups(4), "groups-1bank": lambda: groups(1)}[name]()


@pytest.fixture(scope="module")
def graphs():
    return {k: analytical_graph(r, p) for k, (r, p) in GRAPHS.items()}


@pytest.mark.parametrize("graph_name, chip_name, knobs", CASES,
                         ids=[f"{g}-{c}-{'-'.join(f'{k}{v}' for k, v in kn.items())}" for g, c, kn in CASES])
def test_no_bound_exceeds_the_modelled_latency(graphs, graph_name, chip_name, knobs):
    graph, chip = graphs[graph_name], chip_of(chip_name)
    cand = Candidate(chip, mapping_from_dict({"split": "cols", "placement": "auto", **knobs}))
    options = auto_options(graph, cand)
    assert len(options) > 1
    exact = auto_latencies(graph, cand)
    bounds = latency_bounds(graph, chip, options)
    assert all(b <= e * (1 + 1e-12) for b, e in zip(bounds, exact)), [(o.placement, o.cuts, b, e) for o, b, e
                                                                       in zip(options, bounds, exact) if b > e]
    # SPMD (options[0]) is one range: its ops as in full, only the BARRIERs between requests missing
    requests = knobs.get("requests", 1)
    assert bounds[0] == exact[0] - (requests - 1) * chip.front_end.barrier_cycles
    # and the pruned pick is the pick of costing every option in full
    placed._AUTO.clear()
    assert resolve_auto(graph, cand) == options[int(np.argmin(exact))]


def costed_in_full(graph, cand, monkeypatch) -> int:
    seen = []
    real = placed._latencies
    monkeypatch.setattr(placed, "_latencies", lambda g, cands: seen.extend(cands) or real(g, cands))
    placed._AUTO.clear()
    resolve_auto(graph, cand)
    return len(seen)


def test_the_shipped_pick_costs_one_option_in_full(graphs, monkeypatch):
    # experiments/pipeline.toml's auto candidate (tiny llama prefill, 4 requests, poly) and the
    # same fused: base-0 bounds, every matmul at its cheaper of DRAM and shared memory, left 3
    # options within reach of the best; now only the pick (pipeline cut 10) is costed
    poly = load_chip("poly")
    for fusion in (None, "fuse"):
        cand = Candidate(poly, mapping_from_dict({"workers": 3, "split": "cols", "placement": "auto", "requests": 4,
                                                  **({"fusion": fusion} if fusion else {})}))
        assert costed_in_full(graphs["llama"], cand, monkeypatch) == 1
