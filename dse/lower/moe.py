"""Expert-parallel lowering (``mapping.experts = "spread"``, `dse.plan.moe`): each expert's
chain on its worker alone (the ProgramBuilder narrowed to that worker's program, as a
one-worker candidate: FENCEs, no BARRIER per op), every worker's experts at once; one
BARRIER on every worker, then the index_adds as any op."""

from __future__ import annotations

import contextlib

from emulator import Barrier

from ..mapping import Candidate
from ..mapping.params import CandidateArrays
from ..plan.moe import spread_blocks


@contextlib.contextmanager
def on_worker(b, w: int):
    """The builder emitting into worker w's program only, as a one-worker candidate."""
    saved = b.cores, b.workers, b.mapping, b.cand, b.params
    b.cores, b.workers = [saved[0][w]], 1
    b.mapping = b.mapping.model_copy(update={"workers": 1, "experts": None})
    b.cand = Candidate(b.chip, b.mapping)
    b.params = CandidateArrays.from_candidates([b.cand])
    try:
        yield
    finally:
        b.cores, b.workers, b.mapping, b.cand, b.params = saved


def lower_spread(b, plans) -> None:
    """Emit `plans` (the graph's, in order) with each MoE layer's experts spread."""
    blocks = spread_blocks(b.graph, b.workers)
    where = {name: block for block in blocks for name in block.ops}
    done: set[str] = set()
    for plan in plans:
        block = where.get(plan.op.name)
        if block is None:
            b.lower_op(plan)
            continue
        if block.layer in done:
            continue
        done.add(block.layer)
        mine = [p for p in plans if p.op.name in block.cores]
        for w in range(b.workers):
            with on_worker(b, w):
                for p in mine:
                    if block.cores[p.op.name] == w:
                        b.lower_op(p)
        for c in b.cores:
            c.append(Barrier())
        for p in plans:
            if p.op.name in block.sums:
                b.lower_op(p)


__all__ = ["lower_spread", "on_worker"]
