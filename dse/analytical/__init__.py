"""Closed-form cycles, bytes and SRAM for candidates, without running anything."""

from .dma import dma_cycles
from .estimate import MODEL_VERSION, estimate, summarize
from .matmul import MatmulPlan, matmul_cost, plan_matmul

__all__ = ["MODEL_VERSION", "dma_cycles", "estimate", "summarize", "MatmulPlan", "matmul_cost", "plan_matmul"]
