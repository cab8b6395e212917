"""A small Mamba (transformers' MambaModel: one block, 32 hidden, state 8, 32 tokens, random
weights, nothing downloaded), through transformers' torch path.

Its selective scan (softplus of the step sizes, exp of A dt, the per-step state update
state = dA[t] * state + dB u[t] and the C product, in a Python loop) is unrolled by
torch.export into 32 copies; capture finds the loop again (`dse.workload.reroll`) and keeps
it as ONE scan op whose step runs on the core, 32 times. The projections around it are
matrix-Ball products once quantized."""

import torch
import transformers

TOKENS = 32


def load(tokens: int = TOKENS):
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=128, hidden_size=32, state_size=8, num_hidden_layers=1, expand=2,
                                      conv_kernel=4, use_cache=False)
    return transformers.MambaModel(config).eval()


def inputs(tokens: int = TOKENS):
    return (torch.randint(0, 128, (1, tokens), generator=torch.Generator().manual_seed(1)),)
