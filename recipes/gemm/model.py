"""GEMM: y[M, N] = x[M, K] @ w[K, N], the smallest workload a matrix Ball runs."""

import torch
from torch import nn


class Gemm(nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        self.w = nn.Parameter(torch.empty(k, n))  # filled by load(), not the global RNG

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def load(m: int = 64, n: int = 64, k: int = 64) -> Gemm:
    model = Gemm(k, n)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.w.copy_(torch.randn(k, n, generator=generator) / k**0.5)
    return model.eval()


def inputs(m: int = 64, n: int = 64, k: int = 64) -> tuple[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(m, k, generator=generator),)
