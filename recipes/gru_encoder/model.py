"""GRU encoder: embeddings of 32 tokens -> a GRU (32 -> 64 hidden) -> a linear head.

A state-carrying recurrence (aten.gru): capture hoists the input products of all 32 steps
into one GEMM and keeps the loop as one `scan` op; the quantize step puts its per-step
recurrent product (h @ W_hh.T, 2 x 192 x 64) on the matrix Ball, the cell on the core."""

import torch
from torch import nn

STEPS, BATCH, WIDTH, HIDDEN = 32, 2, 32, 64


class GruEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(WIDTH, HIDDEN, batch_first=True)
        self.head = nn.Linear(HIDDEN, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.head(y)


def load() -> GruEncoder:
    torch.manual_seed(0)  # PyTorch's default GRU / Linear init, reproducible
    return GruEncoder().eval()


def inputs() -> tuple[torch.Tensor]:
    return (torch.randn(BATCH, STEPS, WIDTH, generator=torch.Generator().manual_seed(1)),)
