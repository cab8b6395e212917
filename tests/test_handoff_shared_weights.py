"""A range's q, k and v projections all take their A through shared memory with one shared
copy of the weights (``mapping.weights = "shared"``, #19; before, only q did and k and v read
DRAM): `handoff_banks` takes a shared-weight candidate's hand-offs from the last product to
the first, so each product's B tiles (from bank 0 up, loaded at its start) stay clear of the
A banks of the products after it (loaded before, above them); a product whose A does not fit
and whose B tiles would reach theirs closes the hand-offs after it. The banks by hand, and on a grid of shared banks: bit-exact,
the model within 2% of the emulator, DMA bytes and shared bytes alike."""

from __future__ import annotations

import pytest

from agreement import TINY_LLAMA, emulated_and_modelled, plan_banks, prepared
from dse.analytical.placed import estimate_layers
from dse.chips import load_chip
from dse.mapping import Candidate, Mapping

SHARED_BANK = 16384 * 16  # poly's shared bank: rows x row_bytes
Q, K, V = "linear_acc", "linear_1_acc", "linear_2_acc"


@pytest.fixture(scope="module")
def llama():
    return prepared("llama_prefill", TINY_LLAMA)


def layers(banks: int, weights: str = "shared") -> Candidate:
    """Tiny llama prefill cut before q (op 10) on poly's groups, `banks` shared banks."""
    return Candidate(load_chip("poly", {"shared_memory.banks": banks}),
                     Mapping(split="cols", placement="layers", cuts=(10,), weights=weights))


def test_shared_weights_hand_off_q_k_and_v_with_their_banks_by_hand(llama):
    # q [16 x 32] @ [32 x 64] picks 16 x 32 x 32: 1 A tile, 2 B tiles (a bank each); k and v
    # [16 x 32] @ [32 x 32] pick 16 x 16 x 32: 1 A tile, 2 B tiles. From the last: v at the
    # top (base 0), k below it (1), q below k (2): q's 2 + 1 + 2 B = 5 banks
    for banks in (64, 5):
        assert plan_banks(llama, layers(banks)) == ({V: 0, K: 1, Q: 2}, {V: 1, K: 1, Q: 1})
    # 4 banks: q's A does not fit below k's and v's (2 + 1 + 2 > 4); with its A from DRAM q
    # picks 16 x 16 x 32, whose 4 B tiles (banks 0-3) would reach k's and v's A (4 + 2 > 4):
    # k and v are closed (base 4: no tile fits, their A reads DRAM) and q is picked again at
    # the top (1 + 2 <= 4)
    assert plan_banks(llama, layers(4)) == ({V: 4, K: 4, Q: 0}, {V: 0, K: 0, Q: 1})
    # 3 banks: v at the top (1 + 2 <= 3); k's A does not fit below it (1 + 1 + 2 > 3), nor q's,
    # but their B tiles leave v's bank alone (2 + 1 <= 3): v keeps its hand-off
    assert plan_banks(llama, layers(3)) == ({V: 0, K: 1, Q: 1}, {V: 1, K: 0, Q: 0})
    # 2 banks: no product's 1 A + 2 B fits; nothing held, nothing closed
    assert plan_banks(llama, layers(2)) == ({V: 0, K: 0, Q: 0}, {V: 0, K: 0, Q: 0})
    # a copy of the weights per worker: the order of the products, q at the top
    assert plan_banks(llama, layers(64, "per_worker")) == ({Q: 0, K: 1, V: 2}, {Q: 1, K: 1, V: 1})


@pytest.mark.parametrize("banks, handed, note", [
    (64, 3, "mul_1_int8 to ops linear_acc, linear_1_acc, linear_2_acc (their A) via shared memory: 1536 bytes"),
    (5, 3, "mul_1_int8 to ops linear_acc, linear_1_acc, linear_2_acc (their A) via shared memory: 1536 bytes"),
    # the products left out say why they read DRAM: closed by q's B tiles, or not fitting
    (4, 1, "mul_1_int8 to op linear_acc's A via shared memory: 512 bytes; "
           "op linear_1_acc's A via DRAM: op linear_acc's shared B tiles would reach the banks op linear_1_acc's "
           "A tiles take; "
           "op linear_2_acc's A via DRAM: op linear_acc's shared B tiles would reach the banks op linear_2_acc's "
           "A tiles take"),
    (3, 1, "mul_1_int8 to op linear_2_acc's A via shared memory: 512 bytes; "
           "op linear_acc's A via DRAM: op linear_acc's A tiles do not fit shared memory one bank each with the "
           "whole reduction in one tile (K split, or more tiles than the shared banks B leaves beside the 1 bank "
           "the A tiles of the hand-offs before it hold); "
           "op linear_1_acc's A via DRAM: op linear_1_acc's A tiles do not fit shared memory one bank each with the "
           "whole reduction in one tile (K split, or more tiles than the shared banks B leaves beside the 1 bank "
           "the A tiles of the hand-offs before it hold)"),
    (2, 0, "mul_1_int8 via DRAM: op linear_acc's A tiles do not fit shared memory"),
])
def test_a_grid_of_shared_banks_is_bit_exact_and_modelled(llama, banks, handed, note):
    rep, model, _ = emulated_and_modelled(llama, layers(banks))  # bit-exact, within 2%
    dma = sum(rep.counters["dma_bytes_in"]) + sum(rep.counters["dma_bytes_out"])
    assert dma == model["dma_bytes"]
    assert rep.counters["shared_bytes_used"] == model["shared_sram_bytes"]
    assert rep.handoffs[0][0] == "mul_1_int8" and rep.handoffs[0][3].startswith(note), rep.handoffs[0]
    _, _, notes = estimate_layers(llama.graph, [layers(banks)])
    assert "; ".join(h[3] for h in rep.handoffs) == notes[0]  # the lowering's words, the model's words
    # every A tile handed off saves the 2 workers of the second group a 512-byte A load each
    # and costs the first group one 512-byte load: 512 bytes less a product
    base = emulated_and_modelled(llama, layers(2))[0] if handed else rep
    base_dma = sum(base.counters["dma_bytes_in"]) + sum(base.counters["dma_bytes_out"])
    assert base_dma - dma == 512 * handed


def test_the_spec_sweeps_the_grid_tested_here():
    from pathlib import Path

    from dse.runner.spec import load_spec
    m = load_spec(Path(__file__).resolve().parents[1] / "experiments" / "handoff_shared_weights.toml").model
    assert m.baseline.chip == "poly" and m.baseline.mapping == {"split": "cols", "placement": "layers", "cuts": [10]}
    banks = [c.set.get("chip.shared_memory.banks") for c in m.candidates if c.set.get("mapping.weights") == "shared"]
    assert banks == [None, 5, 4, 2, None]
