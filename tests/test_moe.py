"""Mixture-of-experts (issue #34): transformers' MoE decoders (tiny configs, random weights,
nothing downloaded) captured with the router's top-k on the core and each expert's matmuls
on the matrix Ball over the tokens the example inputs route to it (`dse.workload.moe`);
`recipe check` passes, emulation on goban with 1 and 4 workers is bit-exact on the integer
path and the model within 2% of the emulator; the recorded routing is PyTorch's own."""

from __future__ import annotations

import pytest
import torch

from dse.workload.libraries import prepare_torchvision
from dse.workload.moe import moe_layers
from test_real_models import MODELS, check_and_emulate, make_recipe

prepare_torchvision()  # transformers' model classes import torchvision
transformers = pytest.importorskip("transformers")

MOE = dict(num_hidden_layers=1, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
           vocab_size=64, max_position_embeddings=16, use_cache=False, num_experts_per_tok=2)
MOE_MODELS = {
    "mixtral": ("MixtralConfig", "MixtralForCausalLM", dict(MOE, intermediate_size=64, num_local_experts=4)),
    # a shared expert beside the routed ones, its output gated by a sigmoid
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(MOE, intermediate_size=64, moe_intermediate_size=32,
                                                               shared_expert_intermediate_size=64, num_experts=4)),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM", dict(MOE, intermediate_size=32, num_experts=4, eos_token_id=0,
                                                     pad_token_id=1)),
}
MODELS.update(MOE_MODELS)


def torch_routing(name: str, inputs) -> list[int]:
    """Tokens per expert as the model's own router picks them (its top-k indices, hooked)."""
    config, model, kwargs = MOE_MODELS[name]
    torch.manual_seed(0)  # the recipe's load()
    model = getattr(transformers, model)(getattr(transformers, config)(**kwargs)).eval()
    experts = next(m for m in model.modules() if hasattr(m, "down_proj") and hasattr(m, "num_experts"))
    seen = []
    handle = experts.register_forward_hook(lambda m, args, out: seen.append(args[1]))
    with torch.no_grad():
        model(*inputs)
    handle.remove()
    return torch.bincount(seen[0].reshape(-1), minlength=experts.num_experts).tolist()


@pytest.mark.parametrize("name", sorted(MOE_MODELS))
def test_a_transformers_moe_decoder_checks_and_emulates_bit_exact(tmp_path, name):
    prep, cycles = check_and_emulate(make_recipe(tmp_path, name))
    assert cycles[4] < cycles[1]
    [layer] = moe_layers(prep.graph)
    assert (layer.experts, layer.top_k, layer.tokens) == (4, 2, 8)
    assert sum(layer.counts) == 16 and layer.counts == torch_routing(name, prep.inputs)
    kind = {op.name: op.kind for op in prep.graph.ops}
    kinds = {kind[n] for x in layer.routed for n in x.ops}
    # each expert: its gather, two int8 products (quantized as any linear), its scaled sum
    assert {"moe_tokens", "index", "quantize", "matmul", "moe_weights", "index_add"} <= kinds
    assert all([kind[n] for n in x.ops].count("matmul") == 2 for x in layer.routed)


def test_the_captured_graph_follows_the_recorded_routing_and_refuses_another(tmp_path):
    """The graph computes the routing at run time (top-k on the router's softmax, then each
    expert's token ids): on the example inputs it gives PyTorch's output; inputs that route
    differently stop with the expert, the count and the recorded one."""
    from dse.workload.capture import capture

    config, model, kwargs = MOE_MODELS["mixtral"]
    torch.manual_seed(0)
    model = getattr(transformers, model)(getattr(transformers, config)(**kwargs)).eval()
    tokens = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))
    graph = capture(model, tokens)
    with torch.no_grad():
        expected = model(tokens).logits
    assert torch.allclose(graph.run(tokens)[0], expected, atol=1e-6)
    topk = [op for op in graph.ops if op.kind == "topk"]
    assert [(op.attrs["k"], op.attrs["item"]) for op in topk] == [(2, 0), (2, 1)]
    other = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(7))
    with pytest.raises(ValueError, match=r"tokens to expert \d, the captured routing \d"):
        graph.run(other)
