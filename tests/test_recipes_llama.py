"""The LLaMA recipes' target-independent rewrites (RoPE with cat, grouped-query attention
without KV copies, cat-grown cache), checked against a plain LLaMA written the usual way
(slice-assigned RoPE, K/V repeated per query head); and decode continuing a prefill."""

from __future__ import annotations

import math

import pytest
import torch

from dse.workload import load_recipe
from dse.workload.recipes import instantiate

CONFIG = dict(dim=64, heads=4, kv_heads=2, head_dim=16, ffn=96, vocab=80, layers=2)


def rms(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_by_slices(t, positions, head_dim, theta=10000.0):
    """The textbook rotation, written with slice assignment."""
    half = head_dim // 2
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = positions.double()[..., None] * inv_freq  # [b, s, half]
    cos, sin = angles.cos().float()[:, None], angles.sin().float()[:, None]  # [b, 1, s, half]
    out = torch.empty_like(t)
    out[..., :half] = t[..., :half] * cos - t[..., half:] * sin
    out[..., half:] = t[..., half:] * cos + t[..., :half] * sin
    return out


def plain_llama(model, tokens, positions, past_k=None, past_v=None, causal=False):
    b, s = tokens.shape
    heads, kv_heads, d = CONFIG["heads"], CONFIG["kv_heads"], CONFIG["head_dim"]
    x = model.embed.weight[tokens]
    new_k, new_v = [], []
    for i, layer in enumerate(model.layers):
        h = rms(x, layer.input_norm.weight)
        q = (h @ layer.attn.q_proj.weight.T).view(b, s, heads, d).transpose(1, 2)
        k = (h @ layer.attn.k_proj.weight.T).view(b, s, kv_heads, d).transpose(1, 2)
        v = (h @ layer.attn.v_proj.weight.T).view(b, s, kv_heads, d).transpose(1, 2)
        q, k = rope_by_slices(q, positions, d), rope_by_slices(k, positions, d)
        if past_k is not None:
            k, v = torch.cat([past_k[i], k], 2), torch.cat([past_v[i], v], 2)
        new_k.append(k)
        new_v.append(v)
        k_rep = k.repeat_interleave(heads // kv_heads, dim=1)  # one copy of K/V per query head
        v_rep = v.repeat_interleave(heads // kv_heads, dim=1)
        scores = q @ k_rep.transpose(-1, -2) / math.sqrt(d)
        if causal:
            scores = scores.masked_fill(torch.ones(s, k.shape[2], dtype=torch.bool).triu(1), float("-inf"))
        out = (scores.softmax(-1) @ v_rep).transpose(1, 2).reshape(b, s, heads * d)
        x = x + out @ layer.attn.o_proj.weight.T
        h = rms(x, layer.post_norm.weight)
        gate, up = h @ layer.gate_proj.weight.T, h @ layer.up_proj.weight.T
        x = x + (torch.nn.functional.silu(gate) * up) @ layer.down_proj.weight.T
    logits = rms(x, model.norm.weight) @ model.lm_head.weight.T
    return logits, torch.stack(new_k), torch.stack(new_v)


def close(got, want, rel=1e-5):
    assert got.shape == want.shape
    error = (got - want).abs().max().item()
    assert error <= rel * want.abs().max().item(), error


def test_decode_rewrites_match_a_plain_llama():
    model, inputs = instantiate(load_recipe("llama_decode"), past=9, **CONFIG)
    with torch.no_grad():
        got = model(*inputs)
        want = plain_llama(model, inputs[0], inputs[1], inputs[2], inputs[3])
    for g, w in zip(got, want):
        close(g, w)
    assert got[1].shape == (2, 1, 2, 10, 16)  # [layers, batch, kv_heads, past + 1, head_dim]


def test_prefill_rewrites_match_a_plain_llama():
    model, inputs = instantiate(load_recipe("llama_prefill"), seq=7, **CONFIG)
    with torch.no_grad():
        got = model(*inputs)
        want = plain_llama(model, inputs[0], inputs[1], causal=True)
    for g, w in zip(got, want):
        close(g, w)


def test_decode_continues_a_prefill():
    """Prefill of 6 tokens, then one decode step from its cache, gives the logits a
    prefill of all 7 tokens gives for the last one: the two recipes are one model."""
    tokens = torch.tensor([[5, 17, 3, 60, 2, 41, 9]])
    prefill7, _ = instantiate(load_recipe("llama_prefill"), seq=7, **CONFIG)
    prefill6, _ = instantiate(load_recipe("llama_prefill"), seq=6, **CONFIG)
    decode, _ = instantiate(load_recipe("llama_decode"), past=6, **CONFIG)
    for a, b in zip(prefill6.parameters(), decode.parameters()):
        assert torch.equal(a, b)
    with torch.no_grad():
        full, _, _ = prefill7(tokens, torch.arange(7)[None])
        _, k, v = prefill6(tokens[:, :6], torch.arange(6)[None])
        step, k7, v7 = decode(tokens[:, 6:], torch.tensor([[6]]), k, v)
    close(step, full[:, -1:])
    assert k7.shape[3] == 7 and torch.equal(k7[:, :, :, :6], k)


def test_bad_head_counts_are_input_errors():
    from dse.errors import InputError

    with pytest.raises(InputError, match="multiple of kv_heads"):
        instantiate(load_recipe("llama_decode"), heads=3, kv_heads=2)
