"""Pareto fronts over any number of objectives."""

from __future__ import annotations

import numpy as np


def pareto_mask(values: np.ndarray, directions: list[str]) -> np.ndarray:
    """True for rows of `values` (n x k) that no other row dominates."""
    v = np.asarray(values, dtype=float).copy()
    for j, d in enumerate(directions):
        if d == "maximize":
            v[:, j] = -v[:, j]
    # i is dominated if some j is <= everywhere and < somewhere.
    le = (v[None, :, :] <= v[:, None, :]).all(axis=2)
    lt = (v[None, :, :] < v[:, None, :]).any(axis=2)
    return ~(le & lt).any(axis=1)
