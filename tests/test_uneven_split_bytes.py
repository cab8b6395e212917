"""The model's DMA bytes when a matmul's output blocks do not split evenly over the workers:
the last worker takes the blocks left over (44 column blocks on 3 workers: 15, 15, 14), and
the model counts its loads, not the others' (it used to charge every worker the busiest's)."""

from __future__ import annotations

import pytest

from agreement import TINY_LLAMA, emulated_and_modelled, prepared
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping


def dma(rep) -> int:
    return sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])


def test_the_ffn_projection_on_three_workers_by_hand():
    """Tiny llama's last-token gate projection: A (1 x 32, padded to a 16 x 32 tile), B
    (32 x 704): 44 column blocks of 16, one k step. Split by columns on 3 workers (15, 15,
    14 blocks) each worker loads A once and each block's B tile and writes its C tile:
    3 x 512 + 44 x 512 + 44 x 1024 bytes."""
    prep = prepared("llama_prefill", TINY_LLAMA)
    cand = Candidate(load_chip("poly"), Mapping(policy="search", workers=3, split="cols"))
    rep, model, per_op = emulated_and_modelled(prep, cand)
    row = per_op.set_index("op").loc["linear_4_acc"]
    assert (row.tile_m, row.tile_n, row.tile_k, row.workers_used) == (16, 16, 32, 3)
    assert row.dma_bytes == 3 * 512 + 44 * 512 + 44 * 1024 == 69120
    assert dma(rep) == model["dma_bytes"] == 242112


@pytest.mark.parametrize("m,n,k,workers,split", [
    (48, 80, 32, 3, "cols"), (80, 48, 32, 3, "rows"), (64, 112, 64, 4, "cols"), (112, 64, 96, 4, "rows"),
    (32, 48, 160, 2, "cols"), (16, 16, 16, 3, "cols"),
])
def test_uneven_splits_move_the_bytes_the_emulator_moves(m, n, k, workers, split):
    prep = prepared("gemm", {"m": m, "n": n, "k": k})
    cand = Candidate(load_chip("goban"), Mapping(policy="framework", workers=workers, split=split))
    rep, model, _ = emulated_and_modelled(prep, cand)
    assert dma(rep) == model["dma_bytes"]
