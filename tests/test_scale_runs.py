"""`dse.plan.streams._scale_runs` (numpy) gives the runs the row-by-row loop it replaced gave:
maximal runs of rows with one scale, padding rows (NaN) joining any run, never at its ends."""

from __future__ import annotations

import numpy as np
import pytest

from dse.plan.streams import _scale_runs


def row_by_row(rs: list) -> list[tuple[int, int, float]]:
    """The loop `_runs` ran before (None: a padding row)."""
    out, i, n = [], 0, len(rs)
    while i < n:
        if rs[i] is None:
            i += 1
            continue
        s = rs[i]
        j = i + 1
        while j < n and (rs[j] is None or rs[j] == s):
            j += 1
        while rs[j - 1] is None:
            j -= 1
        out.append((i, j, s))
        i = j
    return out


def test_by_hand():
    nan = np.nan
    rs = np.array([nan, 0.5, nan, 0.5, 0.25, 0.25, nan, nan, 0.5, nan], dtype=np.float32)
    assert _scale_runs(rs) == [(1, 4, 0.5), (4, 6, 0.25), (8, 9, 0.5)]
    assert _scale_runs(np.full(4, nan, dtype=np.float32)) == []
    assert _scale_runs(np.array([0.1], dtype=np.float32)) == [(0, 1, float(np.float32(0.1)))]


@pytest.mark.parametrize("seed", range(20))
def test_runs_as_row_by_row(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    values = rng.choice(np.array([0.5, 0.25, 1 / 3, 7.0], dtype=np.float32)[:int(rng.integers(1, 5))], n)
    rs = values.astype(np.float32)
    rs[rng.random(n) < rng.random()] = np.nan
    loop = row_by_row([None if np.isnan(x) else float(x) for x in rs])
    got = _scale_runs(rs)
    assert got == loop
    assert all(type(s) is float for _, _, s in got)
