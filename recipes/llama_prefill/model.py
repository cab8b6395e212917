"""Prefill of a small LLaMA-style model over a prompt: RMSNorm, rotary position
embedding, grouped-query attention under a causal mask, SwiGLU MLP. The same block as
`llama_decode` (the code is copied, not shared, by the recipe convention); only the last
token's logits are used, and the recipe's `select_last_token` step makes the LM head (and
everything before it that works token by token) see that one row.

Target-independent rewrites that keep the numerics (each checked against a plain LLaMA
in tests/test_recipes_llama.py):
- RoPE's half rotation is written with `cat` (no slice assignment);
- grouped-query attention groups the query heads by their KV head (a reshape) instead of
  repeating K and V for every query head;
- the causal mask is a buffer built once in `load()`, broadcast over the query group.

Graph inputs: token ids [1, seq], position ids [1, seq]. Outputs: logits [1, seq, vocab]
and the prompt's keys and values [layers, 1, kv_heads, seq, head_dim] (the KV cache a
decode step starts from).
"""

import torch
import torch.nn.functional as F
from torch import nn

# The graph's outputs by name, in forward's order: the numerics checks each on its own.
OUTPUTS = ("logits", "k_cache", "v_cache")

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
        return self.o_proj(out), k, v


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
        attn, k, v = self.attn(self.input_norm(x), cos, sin, mask)
        x = x + attn
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h)), k, v


class Llama(nn.Module):
    def __init__(self, vocab, dim, layers, heads, kv_heads, head_dim, ffn, max_positions, theta=10000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, kv_heads, head_dim, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        # The rotary tables and the causal mask are buffers made by `tables`, which `load`
        # calls again once the parameters, built on the meta device, have memory (to_empty
        # leaves the buffers unset too). This comment and the two lines below take the seven
        # lines of the code they replaced, so the ops of forward keep their source lines
        # (model.py:N, in dumps and programs: bench/same_points.py's hashes).
        self.theta = theta
        self.tables(head_dim, max_positions)

    def forward(self, tokens, positions):
        x = self.embed(tokens)
        cos, sin = F.embedding(positions, self.cos_table), F.embedding(positions, self.sin_table)
        new_k, new_v = [], []
        for layer in self.layers:
            x, k, v = layer(x, cos, sin, self.mask)
            new_k.append(k.unsqueeze(0))
            new_v.append(v.unsqueeze(0))
        logits = self.lm_head(self.norm(x))
        return logits, torch.cat(new_k, dim=0), torch.cat(new_v, dim=0)

    def tables(self, head_dim: int, max_positions: int) -> "Llama":
        """The rotary tables and the causal mask, (re)computed as buffers."""
        theta = self.theta
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float64), inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        self.register_buffer("cos_table", angles.cos().float(), persistent=False)
        self.register_buffer("sin_table", angles.sin().float(), persistent=False)
        causal = torch.full((max_positions, max_positions), float("-inf")).triu(1)
        self.register_buffer("mask", causal, persistent=False)  # [seq, seq]: 0 on and below the diagonal
        return self


def _config(vocab, dim, layers, heads, kv_heads, head_dim, ffn) -> dict:
    if heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    return dict(vocab=vocab, dim=dim, layers=layers, heads=heads, kv_heads=kv_heads, head_dim=head_dim, ffn=ffn)


def load(seq: int = 64, vocab: int = 1024, dim: int = 256, layers: int = 2, heads: int = 8, kv_heads: int = 2,
         head_dim: int = 32, ffn: int = 704) -> Llama:
    config = _config(vocab, dim, layers, heads, kv_heads, head_dim, ffn)
    # Built on the meta device, then given memory: every parameter is drawn below, and the
    # modules' own init was a second pass over a real layer's 218M weights (drawing from the
    # global RNG). The tables and the mask are computed again on the CPU.
    with torch.device("meta"):
        model = Llama(**config, max_positions=seq)
    model.to_empty(device="cpu").tables(head_dim, seq)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.8, 1.2, generator=generator)
            elif name == "embed.weight":
                param.normal_(0.0, 1.0, generator=generator)
            else:
                param.uniform_(-param.shape[1] ** -0.5, param.shape[1] ** -0.5, generator=generator)
    return model.eval()


def inputs(seq: int = 64, vocab: int = 1024, dim: int = 256, layers: int = 2, heads: int = 8, kv_heads: int = 2,
           head_dim: int = 32, ffn: int = 704) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (1, seq), generator=generator)
    return tokens, torch.arange(seq).unsqueeze(0)
