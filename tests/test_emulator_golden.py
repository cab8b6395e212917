"""The emulator's cycles and counters are those of the code before its speed work (commit
f9639cc, which every test of that commit held): small recipes lowered by dse and the
emulator's own tiled matmuls, on one core and on four sharing the DRAM bus, in both timing
modes. A faster functional or timing pass must give the same numbers, every counter of
every core, Ball, bank and channel (a digest of them all, host seconds left out)."""

from __future__ import annotations

import hashlib
import json

import pytest

import emulator
from dse.chips import load_chip
from dse.frontend import run_pipeline
from dse.mapping import Candidate, Mapping
from dse.numerics import emulate_graph
from emulator.programs import matmul_inputs, tiled_matmul

LLAMA = dict(seq=16, vocab=64, dim=32, layers=1, heads=2, kv_heads=1)
PARAMS = {"llama_prefill": LLAMA, "mlp": dict(batch=8), "resnet_block": dict(channels=16, size=8)}

RECIPES = [  # recipe, chip, workers, mode, cycles, counter digest (computed at f9639cc)
    ("llama_prefill", "goban", 4, "overlapped", 526835, "7b8ff84bc5f4dfdf"),
    ("llama_prefill", "goban", 4, "serial", 611411, "e5cd639717d70600"),
    ("llama_prefill", "toy", 1, "overlapped", 371832, "4fafd2f27cde7736"),
    ("llama_prefill", "toy", 1, "serial", 371872, "b4c1db17b527775d"),
    ("mlp", "goban", 4, "overlapped", 3297828, "a9f9a31ee5db0580"),
    ("mlp", "goban", 4, "serial", 5546544, "859813450020bcee"),
    ("mlp", "pebble", 1, "overlapped", 2068316, "2bfedeb8e45b649e"),
    ("mlp", "pebble", 1, "serial", 2210024, "2f425a736f6549c3"),
    ("resnet_block", "goban", 4, "overlapped", 55478, "696eda0fb7beef7b"),
    ("resnet_block", "goban", 4, "serial", 55462, "34c308c2b9f6ec27"),
]

MATMULS = [  # chip, cores, layout, M = N = K, tile, mode, cycles, counter digest (computed at f9639cc)
    ("goban", 4, "blocked", 256, (32, 16, 32), "overlapped", 794679, "fd4787a34e86e7fa"),
    ("goban", 4, "blocked", 256, (32, 16, 32), "serial", 1138698, "fa410e87ed2049d1"),
    ("goban", 4, "rowmajor", 192, (32, 16, 32), "overlapped", 821799, "090b9e050e828974"),
    ("goban", 4, "rowmajor", 192, (32, 16, 32), "serial", 1006090, "3c380d11f53a0628"),
    ("toy", 1, "blocked", 128, (32, 16, 32), "overlapped", 312619, "d6df5d8076e31cdd"),
    ("toy", 1, "blocked", 128, (32, 16, 32), "serial", 341002, "437cf25793c1f38e"),
]


# Counters added after f9639cc, checked by tests of their own (tests/test_ppa.py: ball_macs).
LATER = {"ball_macs"}


def counter_digest(counters) -> str:
    rows = [r for r in counters.rows() if not r["name"].startswith("host_") and r["name"] not in LATER]
    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()[:16]


@pytest.mark.parametrize("recipe, chip, workers, mode, cycles, digest", RECIPES)
def test_recipe_cycles_and_counters_unchanged(recipe, chip, workers, mode, cycles, digest):
    pipe = run_pipeline(recipe, PARAMS[recipe])
    rep = emulate_graph(pipe.graph, Candidate(load_chip(chip), Mapping(workers=workers)), list(pipe.inputs),
                        mode=mode)
    assert rep.verdict.integer_bit_exact
    assert (rep.cycles, counter_digest(rep.result.counters)) == (cycles, digest)


@pytest.mark.parametrize("chip, cores, layout, size, tile, mode, cycles, digest", MATMULS)
def test_tiled_matmul_cycles_and_counters_unchanged(chip, cores, layout, size, tile, mode, cycles, digest):
    prog = tiled_matmul(size, size, size, *tile, cores=cores, layout=layout)
    _, _, values = matmul_inputs(size, size, size, *tile, layout=layout, seed=1)
    r = emulator.run(prog, load_chip(chip), values, mode=mode)
    assert (r.cycles, counter_digest(r.counters)) == (cycles, digest)
