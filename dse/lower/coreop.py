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
from ..workload.graph import INTERPRETERS


def _graph_op(srcs: list, params: dict) -> np.ndarray:
    op = params["op"]
    args = [torch.from_numpy(np.asarray(s, order="C")) for s in srcs]
    with torch.no_grad():
        out = INTERPRETERS[op.kind](op, args)
    return out.numpy()


def ensure_registered() -> None:
    if coreops.KINDS.get(GRAPH_OP) is not _graph_op:
        coreops.register(GRAPH_OP, _graph_op, (0, 64))
