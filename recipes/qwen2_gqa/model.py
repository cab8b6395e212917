"""Qwen2 from transformers: a decoder with grouped-query attention (kv_heads < heads),
rotary positions and RMSNorm, built from a config with random weights (nothing is
downloaded). The model code is transformers' own: dse captures it as the library wrote it,
folding its position ids, causal mask and rotary tables into constants."""

import torch
import transformers


def load(layers: int = 2, dim: int = 64, heads: int = 4, kv_heads: int = 2, ffn: int = 128, vocab: int = 256,
         seq: int = 16):
    torch.manual_seed(0)
    config = transformers.Qwen2Config(num_hidden_layers=layers, hidden_size=dim, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads, intermediate_size=ffn, vocab_size=vocab,
                                      max_position_embeddings=max(seq, 16), use_cache=False)
    return transformers.Qwen2ForCausalLM(config).eval()


def inputs(layers: int = 2, dim: int = 64, heads: int = 4, kv_heads: int = 2, ffn: int = 128, vocab: int = 256,
           seq: int = 16):
    return (torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(1)),)
