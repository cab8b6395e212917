"""Mixtral from transformers: a decoder whose feed-forward is a sparse mixture of experts
(a router picks `top_k` of `experts` per token; each expert a SwiGLU MLP), built from a
config with random weights (nothing is downloaded). dse captures the router as graph ops
(its softmax and top-k on the core) and each expert's matmuls over the tokens the example
inputs route to it (`dse.workload.moe`); `batch` sequences of `seq` tokens."""

import torch
import transformers


def load(layers: int = 1, dim: int = 64, heads: int = 4, kv_heads: int = 2, ffn: int = 128, experts: int = 8,
         top_k: int = 2, vocab: int = 256, batch: int = 8, seq: int = 4):
    torch.manual_seed(0)
    config = transformers.MixtralConfig(num_hidden_layers=layers, hidden_size=dim, num_attention_heads=heads,
                                        num_key_value_heads=kv_heads, intermediate_size=ffn,
                                        num_local_experts=experts, num_experts_per_tok=top_k, vocab_size=vocab,
                                        max_position_embeddings=max(seq, 16), use_cache=False)
    return transformers.MixtralForCausalLM(config).eval()


def inputs(layers: int = 1, dim: int = 64, heads: int = 4, kv_heads: int = 2, ffn: int = 128, experts: int = 8,
           top_k: int = 2, vocab: int = 256, batch: int = 8, seq: int = 4):
    return (torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1)),)
