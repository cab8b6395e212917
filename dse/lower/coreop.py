"""The core-op kind that runs any graph op on the core, charged, never free.

Ops with no Ball mapping (norms, softmax, attention, pooling, float products, data
movement) run on the core as ``CoreOp("graph_op", ...)``: the emulator's functional model
computes them with the graph's own reference interpreter (so a float op gives the very
bits of the PyTorch reference), and the timing model charges the core
``elements x cycles per element`` (`dse.cost.charged_elements`).
"""

from __future__ import annotations

import numpy as np
import torch

from emulator import coreops

from ..cost.core import GRAPH_OP
from ..plan.chains import CHAIN_KIND
from ..workload.graph import INTERPRETERS


def _graph_op(srcs: list, params: dict) -> np.ndarray:
    op = params["op"]
    args = [torch.from_numpy(np.asarray(s, order="C")) for s in srcs]
    with torch.no_grad():
        out = INTERPRETERS[op.kind](op, args)
    return out.numpy()


def _graph_chain(srcs: list, params: dict) -> np.ndarray:
    """A fused score chain (`dse.plan.chains`) over a part: srcs[0] is its batch entries'
    blocked accumulator tiles (b, Mt, tm, Nt, tn), the rest the stages' weight operands in
    order; the result is rows r0..r1 of the N logical columns. Each stage runs with the
    graph's interpreter over the entries' logical rows, kept at the graph's rank (the batch
    axes folded into the first) so axes and reshapes mean what they say; every stage is
    row-independent, so the part's rows are the bits it would compute alone (it is charged
    its own rows only: the CoreOp's elements)."""
    ops, (M, N), (r0, r1), k = params["ops"], params["extent"], params["rows"], params["batch_rank"]
    grid = np.asarray(srcs[0])
    b = grid.shape[0]
    lead = (b,) + (1,) * (k - 1) if k else ()  # this part's batch entries in the graph's batch axes
    scores = grid.reshape(b, grid.shape[1] * grid.shape[2], grid.shape[3] * grid.shape[4])[:, :M, :N]
    value = torch.from_numpy(np.ascontiguousarray(scores).reshape(lead + (M, N)))
    extra = iter(torch.from_numpy(np.asarray(s, order="C")) for s in srcs[1:])
    with torch.no_grad():
        for op, shape in zip(ops, params["shapes"]):
            if op.kind == "reshape":  # regroups each entry's rows (`dse.plan.chains`)
                value = value.reshape(lead + tuple(shape[k:]))
            else:
                value = INTERPRETERS[op.kind](op, [value] + [next(extra) for _ in op.inputs[1:]])
    return value.numpy().reshape(b, M, N)[:, r0:r1]


def ensure_registered() -> None:
    # pure: the graph's interpreters write only into tensors they made (the reference trace
    # hands them its own values too), so the ops read the DRAM image itself, not copies of
    # it (an attention's scores are hundreds of MB)
    if coreops.KINDS.get(GRAPH_OP) is not _graph_op:
        coreops.register(GRAPH_OP, _graph_op, (0, 64), pure=True)
    if coreops.KINDS.get(CHAIN_KIND) is not _graph_chain:
        coreops.register(CHAIN_KIND, _graph_chain, (1, 64), pure=True)
