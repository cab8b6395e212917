"""A ViT encoder block (pre-norm): LayerNorm, multi-head self-attention (one fused QKV
projection, scaled-dot-product attention), residual; LayerNorm, GELU MLP, residual.
ViT-Tiny sizes by default: 197 tokens, width 192, 3 heads, MLP ratio 4."""

import torch
import torch.nn.functional as F
from torch import nn


class VitBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # [b, heads, n, head_dim] each
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def load(tokens: int = 197, dim: int = 192, heads: int = 3, mlp_ratio: int = 4) -> VitBlock:
    with torch.random.fork_rng(devices=[]):  # construction draws from the global RNG: keep it untouched
        model = VitBlock(dim, heads, mlp_ratio)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                bound = module.in_features ** -0.5
                module.weight.uniform_(-bound, bound, generator=generator)
                module.bias.uniform_(-bound, bound, generator=generator)
            elif isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5, generator=generator)
                module.bias.uniform_(-0.1, 0.1, generator=generator)
    return model.eval()


def inputs(tokens: int = 197, dim: int = 192, heads: int = 3, mlp_ratio: int = 4) -> tuple[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return (torch.randn(1, tokens, dim, generator=generator),)
