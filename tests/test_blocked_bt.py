"""A weight's Bt tiles (`dse.units.matrix.blocked_bt` / `BlockedBt`): each tile element
where the definition puts it, from a row-major Bt and from a pretransposed (K, N) weight's
transposed view, padded or not; and written straight into the DRAM image by `Dram.constant`
as the array form would be."""

import numpy as np
import pytest

from dse.plan.memory import Dram
from dse.units.matrix import BlockedBt, blocked_bt


def by_definition(bt, Np, Kp, tn, tk):
    """out[b, ni, ki, r, c] = Bt[b, ni*tn + r, ki*tk + c], zero past (N, K): element by element."""
    nbB, N, K = bt.shape
    out = np.zeros((nbB, Np // tn, Kp // tk, tn, tk), dtype=np.int8)
    for b, ni, ki, r, c in np.ndindex(out.shape):
        n, k = ni * tn + r, ki * tk + c
        if n < N and k < K:
            out[b, ni, ki, r, c] = bt[b, n, k]
    return out


CASES = [(1, 32, 48, 32, 48, 16, 16), (2, 32, 64, 32, 64, 16, 32), (1, 20, 40, 32, 48, 16, 16),
         (3, 16, 16, 16, 16, 16, 16)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("pretransposed", [False, True])
def test_tiles_by_definition(case, pretransposed):
    nbB, N, K, Np, Kp, tn, tk = case
    rng = np.random.default_rng(7)
    if pretransposed:  # what `permute` leaves: a (K, N) weight, read-only; Bt its transposed view
        kn = rng.integers(-128, 128, (nbB, K, N), dtype=np.int8)
        kn.flags.writeable = False
        bt = np.swapaxes(kn, -1, -2)
    else:
        bt = rng.integers(-128, 128, (nbB, N, K), dtype=np.int8)
    want = by_definition(bt, Np, Kp, tn, tk)
    assert np.array_equal(blocked_bt(bt, Np, Kp, tn, tk), want)


@pytest.mark.parametrize("bind_content", [False, True])
def test_deferred_tiles_land_in_the_image(bind_content):
    rng = np.random.default_rng(3)
    kn = rng.integers(-128, 128, (64, 48), dtype=np.int8)  # K=64, N=48
    bt = kn.T[None]
    dram = Dram()
    dram.bind_content = bind_content
    before = dram.blob(np.arange(5, dtype=np.int32))  # an array constant before: unaligned size
    addr = dram.constant(("w",), BlockedBt(bt, 48, 64, 16, 32), "w: Bt tiles")
    again = dram.constant(("w",), BlockedBt(bt, 48, 64, 16, 32), "w: Bt tiles")  # placed once
    img = dram.image()
    want = by_definition(bt, 48, 64, 16, 32).reshape(-1).view(np.uint8)
    assert again == addr
    assert np.array_equal(img[addr:addr + want.size], want)
    assert np.array_equal(img[before:before + 20].view(np.int32), np.arange(5, dtype=np.int32))
