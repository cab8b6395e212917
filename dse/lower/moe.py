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
def on_worker(builder, worker: int):
    """The builder emitting into `worker`'s program only, as a one-worker candidate."""
    saved = builder.cores, builder.workers, builder.mapping, builder.cand, builder.params
    builder.cores, builder.workers = [saved[0][worker]], 1
    builder.mapping = builder.mapping.model_copy(update={"workers": 1, "experts": None})
    builder.cand = Candidate(builder.chip, builder.mapping)
    builder.params = CandidateArrays.from_candidates([builder.cand])
    try:
        yield
    finally:
        builder.cores, builder.workers, builder.mapping, builder.cand, builder.params = saved


def lower_spread(builder, plans) -> None:
    """Emit `plans` (the graph's, in order) with each MoE layer's experts spread."""
    blocks = spread_blocks(builder.graph, builder.workers)
    where = {name: block for block in blocks for name in block.ops}
    done: set[str] = set()
    for plan in plans:
        block = where.get(plan.op.name)
        if block is None:
            builder.lower_op(plan)
            continue
        if block.layer in done:
            continue
        done.add(block.layer)
        mine = [expert_plan for expert_plan in plans if expert_plan.op.name in block.cores]
        for worker in range(builder.workers):
            with on_worker(builder, worker):
                for expert_plan in mine:
                    if block.cores[expert_plan.op.name] == worker:
                        builder.lower_op(expert_plan)
        for core in builder.cores:
            core.append(Barrier())
        for sum_plan in plans:
            if sum_plan.op.name in block.sums:
                builder.lower_op(sum_plan)


__all__ = ["lower_spread", "on_worker"]
