"""Pareto fronts over any number of objectives, without the n x n comparison.

Two objectives (every plot): sort by the first, sweep keeping the best second seen so far,
O(n log n) time and O(n) memory. More objectives: a sweep in lexicographic order comparing
each point with the front found so far only (a point's dominator sorts before it, and is
itself dominated by a front member if dominated at all), O(n log n + n f).
"""

from __future__ import annotations

import numpy as np


def _oriented(values: np.ndarray, directions: list[str]) -> np.ndarray:
    v = np.array(values, dtype=float, copy=True).reshape(len(values), -1)
    for j, d in enumerate(directions):
        if d == "maximize":
            v[:, j] = -v[:, j]
    return v


def pareto_mask(values: np.ndarray, directions: list[str]) -> np.ndarray:
    """True for rows of `values` (n x k) that no other row dominates (at most as large on
    every objective, smaller on one); equal rows do not dominate each other."""
    v = _oriented(values, directions)
    n, k = v.shape
    if n == 0:
        return np.zeros(0, dtype=bool)
    if k == 1:
        return v[:, 0] == v[:, 0].min()
    if k == 2:
        return _front_2d(v[:, 0], v[:, 1])
    return _front_nd(v)


def _front_2d(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    order = np.lexsort((y, x))
    xs, ys = x[order], y[order]
    # Groups of equal x: a point is dominated by an earlier group whose best y is <= its
    # own, or by a point of its own group with a smaller y.
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    group = np.cumsum(np.r_[True, xs[1:] != xs[:-1]]) - 1
    group_min = ys[starts]  # sorted by y within a group: the first is the smallest
    before = np.r_[np.inf, np.minimum.accumulate(group_min)[:-1]]
    dominated = (before[group] <= ys) | (group_min[group] < ys)
    mask = np.empty(len(x), dtype=bool)
    mask[order] = ~dominated
    return mask


def _front_nd(v: np.ndarray) -> np.ndarray:
    order = np.lexsort(v.T[::-1])
    front: list[int] = []
    mask = np.zeros(len(v), dtype=bool)
    for i in order:
        p = v[i]
        if front:
            f = v[front]
            if ((f <= p).all(axis=1) & (f < p).any(axis=1)).any():
                continue
        front.append(i)
        mask[i] = True
    return mask
