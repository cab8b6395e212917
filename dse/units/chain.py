"""The chain unit: attention's score chain (dequantize of QK^T, scalar and mask stages,
softmax, the quantize PV reads) fused into one core pass under ``mapping.fusion = "fuse"``
(`dse.plan.chains`): one core op a worker over its batch entries of the blocked scores,
writing the int8 probabilities into PV's padded A buffer; charged
``ceil(elements x chain_cpe)`` on the busiest worker.

As the lowering emits it:

* with ``mapping.fusion = "fuse"`` attention's score chain (dequantize of QK^T, scalar and
  mask stages, softmax, the quantize PV reads) is one ``graph_chain`` core op a worker over
  its heads, reading the accumulator's tiles and writing PV's A buffer (`dse.plan.chains`);
"""

from __future__ import annotations

import numpy as np

from emulator import CoreOp, DramTensor

from ..plan.chains import CHAIN_KIND, chain_elements, chain_extent, chain_parts
from ..plan.graph_plan import OpPlan
from .charges import Charges
from .unit import OpLowering, Unit


def emit_chain(builder, plan: OpPlan) -> OpLowering:
    """A fused score chain (`dse.plan.chains`): one core op a worker over its batch entries
    of the blocked scores, writing the int8 probabilities into the padded A buffer."""
    op, chain = plan.op, plan.chain
    scores = builder.loc(chain[0].inputs[0])
    _, M, N = chain_extent(builder.graph, chain)
    spec = builder.graph.tensors[op.outputs[0]]
    out = builder.locs[op.outputs[0]] = builder.dram.place(plan.writes)
    grid = scores.padded_view()
    Mp, Np = out.buffer_shape[-2:]
    weights = tuple(builder.loc(name).view() for stage in chain for name in stage.inputs[1:])
    shapes = [builder.graph.tensors[stage.outputs[0]].shape for stage in chain]
    parts = chain_parts(builder.graph, chain, builder.workers)
    for worker, (lo, hi, row_start, row_end) in enumerate(parts):
        src = DramTensor(grid.addr + lo * grid.strides[0], (hi - lo, *grid.shape[1:]), grid.dtype, grid.strides)
        dst = DramTensor(out.addr + lo * Mp * Np + row_start * Np, (hi - lo, row_end - row_start, N), "int8",
                         (Mp * Np, Np, 1))
        params = {"ops": chain, "extent": (M, N), "rows": (row_start, row_end), "batch_rank": len(spec.shape) - 2,
                  "shapes": shapes}
        builder.cores[worker].append(CoreOp(CHAIN_KIND, dst, (src,) + weights, params,
                                            (hi - lo) * chain_elements(builder.graph, chain, row_end - row_start)))
    builder.sync(False)
    return OpLowering(op.name, op.kind, "chain", workers_used=len(parts))


def charge_chain(cost, charges: Charges, plan: OpPlan):
    """A fused score chain: each worker's part (`chain_parts`) in one core op."""
    graph, chain = cost.graph, plan.chain
    batch, M, _ = chain_extent(graph, chain)
    share = np.array([max((hi - lo) * chain_elements(graph, chain, row_end - row_start)
                          for lo, hi, row_start, row_end in chain_parts(graph, chain, workers))
                      for workers in cost.worker_counts], dtype=np.float64)[cost.worker_at]
    charges.core += np.ceil(share * cost.params.chain_cpe)
    charges.busy += np.ceil(batch * chain_elements(graph, chain, M) * cost.params.chain_cpe)
    charges.core_busy += np.ceil(batch * chain_elements(graph, chain, M) * cost.params.chain_cpe)
    cost.close(charges, False)


def _charge(cost, charges: Charges, plan: OpPlan):
    charge_chain(cost, charges, plan)
    return "core", None


UNIT = Unit("chain", lambda builder, plan, ready: emit_chain(builder, plan), _charge)
