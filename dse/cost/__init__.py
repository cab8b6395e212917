"""The emulator's charges as functions, vectorised over candidates where a sweep needs it:
DMA transfers (`emulator.dma`, fed each candidate's figures), core ops, matrix-Ball GEMMs
(formula or SCALE-Sim-exact systolic timing), Ball streams. The plan picks with them; the
analytical model sums them. Tested equal to the emulator on small cases."""

from .core import GRAPH_OP, charged_elements, core_cycles, split_share
from .dma import candidate_dma_cycles, dma_cycles, dma_cycles_for
from .matmul import MatmulCost, ball_cycles, matmul_cost
from .stream import stream_cycles
from .systolic import systolic_gemm_cycles

__all__ = ["GRAPH_OP", "MatmulCost", "ball_cycles", "candidate_dma_cycles", "charged_elements", "core_cycles",
           "dma_cycles", "dma_cycles_for", "matmul_cost", "split_share", "stream_cycles",
           "systolic_gemm_cycles"]
