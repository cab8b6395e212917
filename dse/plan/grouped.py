"""Grouped and depthwise convolutions: the block-diagonal GEMM on the matrix Ball, or the
whole conv as one core op, per candidate as the cost decides.

A conv of `groups` groups is a GEMM whose weight is block diagonal: group g's input
channels meet only its own output channels. The dense (*kernel, C_in, C_out) weight with
zeros off the diagonal blocks gives the very int32 sums (the zeros add nothing), so the
matrix Ball runs it bit for bit. That path pays for the zeros (groups x the useful
products) and for the im2col gather of every tap of every channel on the core; the core op
pays its multiply-accumulates. Which is cheaper depends on the candidate (cycles per
element of copies and graph ops, the matrix Ball's formula, the tile that fits), so
`on_matrix` decides it per candidate and both consumers follow it: the lowering emits the
chosen path, the analytical model charges it. (A depthwise 3x3 conv gathers as many
elements as it multiplies, so at equal cycles per element the core keeps it; a conv of
wider groups goes to the Ball.)
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..cost.core import charged_elements, split_share
from ..mapping.params import CandidateArrays
from .graph_plan import OpPlan, copy_elements
from .matmul import MatmulPlans, plan_matmuls
from .split import busiest_elements


def block_diagonal(w: np.ndarray, groups: int) -> np.ndarray:
    """A grouped conv's (*kernel, C_in / groups, C_out) weight as the dense
    (*kernel, C_in, C_out) one, zero off the diagonal blocks."""
    *kernel, per_in, c_out = w.shape
    per_out = c_out // groups
    dense = np.zeros((*kernel, per_in * groups, c_out), dtype=w.dtype)
    for g in range(groups):
        dense[..., g * per_in:(g + 1) * per_in, g * per_out:(g + 1) * per_out] = w[..., g * per_out:(g + 1) * per_out]
    return dense


def on_matrix(graph, plan: OpPlan, params: CandidateArrays, gemm: MatmulPlans | None = None) -> np.ndarray:
    """Per candidate: does the grouped conv of `plan` run on the matrix Ball? Where a tile
    fits and its path (the plan's copies before and after, each split as the lowering
    splits it, plus the GEMM's cycles) costs fewer cycles than the conv as one core op on
    worker 0. Tiles (and their cycles) are those of overlapped timing whatever the
    emulator's mode, as every product's are: `gemm`, when the caller has them already."""
    if gemm is None:
        gemm = plan_matmuls(replace(params, serial=np.zeros(params.n, dtype=bool)), plan.gemm)
    workers = np.asarray(params.workers, dtype=np.int64)
    copies = np.zeros(params.n)
    for w in sorted(set(workers.tolist())):
        here = workers == w
        for copy in plan.copies:
            share = busiest_elements("copy", None, copy.shape, [copy.shape], copy_elements(copy), w)
            copies[here] += np.ceil(share * params.copy_cpe[here])
    for copy in plan.after:  # the accumulator's unblock, split along its tile rows
        batch, M, N = copy.blocked
        tm = np.maximum(gemm.tm, 16)
        Mp = copy.shape[1]
        share = split_share(batch * Mp * copy.shape[2], (batch, Mp // tm, tm), workers)
        copies += np.ceil(share * params.copy_cpe)
    op = plan.op
    elements = charged_elements(op, [math.prod(r.shape) for r in plan.reads],
                                math.prod(graph.tensors[op.outputs[0]].shape))
    core = np.ceil(elements * params.graph_op_cpe)
    return gemm.feasible & (copies + gemm.cycles < core)


__all__ = ["block_diagonal", "on_matrix"]
