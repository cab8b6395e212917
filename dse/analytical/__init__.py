"""Closed-form cycles, bytes and SRAM for candidates, without running anything."""

from .dma import dma_cycles, dma_cycles_for
from .estimate import MODEL_VERSION, estimate, summarize
from .matmul import MatmulPlan, MatmulPlans, matmul_cost, plan_matmul, plan_matmuls

__all__ = ["MODEL_VERSION", "dma_cycles", "dma_cycles_for", "estimate", "summarize", "MatmulPlan", "MatmulPlans",
           "matmul_cost", "plan_matmul", "plan_matmuls"]
