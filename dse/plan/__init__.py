"""The plan: per op and candidate, every lowering decision, made once.

Which unit runs an op (`units`: matrix Ball, ReLU Ball, a scale-op Ball stream, the core,
a view), the tile of every matmul (`matmul`, searched by `mapper`), where each tensor lives
and in which layout (`memory`), how a core op is split across workers (`split`), the
pieces of a Ball stream and whether a candidate takes it (`streams`), temporal spans and
their halos (`spans`), what closes an op (`units.sync_after`), and why a candidate is
infeasible (`Infeasible`, `MatmulPlans.reason`). Two consumers read it: the lowering
(`dse.lower`) emits programs from it, the analytical model (`dse.analytical`) costs it
with `dse.cost`, vectorised over candidates.
"""

from .tile_choice import PLAN_FIELDS, MatmulPlans, blocked_reasons
from .mapper import GraphMap, OpMap, gemm_shape, map_graph, map_graph_candidates, search_shape
from .matmul import MatmulPlan, plan_matmul, plan_matmuls
from .memory import Blocked, Dram, Loc
from .split import SPLITTABLE, busiest_elements, shared_loads, split_core_op, split_plan
from .streams import (ELEMENTWISE, Stream, StreamPiece, relu_ball, relu_chunks, scale_core_op, scale_stream,
                      stream_or_core)
from .units import Infeasible, conv_pad, matrix_conv, matrix_product, reshape_view, sync_after, too_many_workers

__all__ = ["Blocked", "Dram", "ELEMENTWISE", "GraphMap", "Infeasible", "Loc", "MatmulPlan", "MatmulPlans", "OpMap",
           "PLAN_FIELDS", "SPLITTABLE", "Stream", "StreamPiece", "blocked_reasons", "busiest_elements", "conv_pad",
           "gemm_shape", "map_graph", "map_graph_candidates", "matrix_conv", "matrix_product", "plan_matmul",
           "plan_matmuls", "relu_ball", "relu_chunks", "reshape_view", "scale_core_op", "scale_stream",
           "search_shape", "shared_loads", "split_core_op", "split_plan", "stream_or_core", "sync_after", "too_many_workers"]
