"""A run of LLaMA decoder layers over a hidden state (RMSNorm, rotary position embedding,
grouped-query attention under a causal mask, SwiGLU MLP: `llama_prefill`'s block, copied by
the recipe convention): the repeated block of a whole model. `layer` is the index of the
first layer here, `layers` how many: layer k's weights are drawn from a generator seeded
with k alone, so the layers of a whole model are the same whether built at once
(``layers=32``) or one at a time (``layer=k, layers=1``, a chain stage with ``repeat``:
`recipes/llama3_8b/chain.toml`), and no layer's weights need another's.

Graph inputs: the hidden state [1, seq, dim] (the embedded prompt: seeded N(0, 1)) and the
position ids [1, seq]. Output: the hidden state after the layers, same shape.
"""

import torch
import torch.nn.functional as F
from torch import nn

OUTPUTS = ("hidden",)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, dim, bias=False)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        group = self.heads // self.kv_heads
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)  # [b, h, s, d]
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)  # [b, kv, s, d]
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [b, 1, s, d]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        t = k.shape[2]
        # Query heads h = kv * group + g share KV head kv: one matmul per KV head, no copies.
        q = q.reshape(b, self.kv_heads, group * s, self.head_dim)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.head_dim**-0.5  # [b, kv, group * s, t]
        scores = (scores.view(b, self.kv_heads, group, s, t) + mask).view(b, self.kv_heads, group * s, t)
        out = torch.matmul(torch.softmax(scores, dim=-1), v)  # [b, kv, group * s, d]
        out = out.view(b, self.heads, s, self.head_dim).transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        return self.o_proj(out)


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, kv_heads: int, head_dim: int, ffn: int):
        super().__init__()
        self.input_norm = RMSNorm(dim)
        self.attn = Attention(dim, heads, kv_heads, head_dim)
        self.post_norm = RMSNorm(dim)
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.input_norm(x), cos, sin, mask)
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def seeded(layer: DecoderLayer, index: int) -> DecoderLayer:
    """Layer `index`'s weights, drawn from a generator seeded with the index alone."""
    generator = torch.Generator().manual_seed(index)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.8, 1.2, generator=generator)
            else:
                param.uniform_(-param.shape[1] ** -0.5, param.shape[1] ** -0.5, generator=generator)
    return layer


class Layers(nn.Module):
    def __init__(self, seq, dim, heads, kv_heads, head_dim, ffn, layers, layer, theta=10000.0):
        super().__init__()
        # each layer allocated but not initialised (`unfilled`), then drawn once (`seeded`)
        self.layers = nn.ModuleList(seeded(unfilled(DecoderLayer, dim, heads, kv_heads, head_dim, ffn), layer + j)
                                    for j in range(layers))
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(seq, dtype=torch.float64), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos_table", angles.cos().float(), persistent=False)
        self.register_buffer("sin_table", angles.sin().float(), persistent=False)
        causal = torch.full((seq, seq), float("-inf")).triu(1)
        self.register_buffer("mask", causal, persistent=False)  # [seq, seq]: 0 on and below the diagonal

    def forward(self, hidden, positions):
        cos, sin = F.embedding(positions, self.cos_table), F.embedding(positions, self.sin_table)
        for layer in self.layers:
            hidden = layer(hidden, cos, sin, self.mask)
        return hidden


def load(seq: int = 16, dim: int = 64, heads: int = 4, kv_heads: int = 2, head_dim: int = 16, ffn: int = 128,
         layers: int = 1, layer: int = 0) -> Layers:
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    return Layers(seq, dim, heads, kv_heads, head_dim, ffn, layers, layer).eval()


def inputs(seq: int = 16, dim: int = 64, heads: int = 4, kv_heads: int = 2, head_dim: int = 16, ffn: int = 128,
           layers: int = 1, layer: int = 0) -> tuple[torch.Tensor, ...]:
    hidden = torch.randn(1, seq, dim, generator=torch.Generator().manual_seed(1))
    return hidden, torch.arange(seq).unsqueeze(0)


def unfilled(cls, *args) -> nn.Module:
    """`cls(*args)` with its parameters allocated but not initialised (built on the meta
    device): `seeded` draws every one, and nn.Linear's own init was a second pass over a real
    layer's 218M weights (and drew from the global RNG)."""
    with torch.device("meta"):
        module = cls(*args)
    return module.to_empty(device="cpu")
