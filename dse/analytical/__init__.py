"""Closed-form cycles, bytes and SRAM for candidates, without running anything."""

from .dma import dma_cycles, dma_cycles_for
from .estimate import MODEL_VERSION, estimate, summarize
from .mapper import GraphMap, OpMap, map_graph, map_graph_candidates, search_shape  # noqa: F401
from .matmul import MatmulPlan, MatmulPlans, matmul_cost, plan_matmul, plan_matmuls
from .systolic import systolic_gemm_cycles

__all__ = ["MODEL_VERSION", "dma_cycles", "dma_cycles_for", "estimate", "summarize", "MatmulPlan", "MatmulPlans",
           "matmul_cost", "plan_matmul", "plan_matmuls", "systolic_gemm_cycles"]
