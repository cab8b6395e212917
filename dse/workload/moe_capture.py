"""Capture of transformers' experts modules as one op each (``dse::moe_experts``) carrying the
recorded routing, expanded into graph ops (`dse.workload.moe` says what they are)."""

from __future__ import annotations

import contextlib
import types
from typing import Any, Iterator

import numpy as np
import torch

from dse.workload.counts import count_op
from dse.workload.graph import TensorSpec, Op

# transformers' hidden_act -> the graph's activation kind (and its attrs)
_ACTIVATIONS = {"silu": ("silu", {}), "swish": ("silu", {}), "relu": ("relu", {}),
                "gelu": ("gelu", {"approximate": "none"}), "gelu_new": ("gelu", {"approximate": "tanh"}),
                "gelu_pytorch_tanh": ("gelu", {"approximate": "tanh"})}


@torch.library.custom_op("dse::moe_experts", mutates_args=())
def moe_experts(hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor,
                counts: list[int]) -> torch.Tensor:
    """Stands for an experts module's call while torch.export traces it (capture expands it
    from the module's own weights: `expand_experts`); never computed."""
    raise RuntimeError("dse::moe_experts is a capture marker, expanded by dse.workload.moe")


@moe_experts.register_fake
def _(hidden, top_k_index, top_k_weights, counts):
    return torch.empty_like(hidden)


def is_experts(module: torch.nn.Module) -> bool:
    """A transformers experts module (`use_experts_implementation`): 3-D stacked weights,
    called as experts(hidden, top_k_index, top_k_weights)."""
    return hasattr(module, "_is_expert_parallel") and hasattr(module, "down_proj") and hasattr(module, "num_experts")


@contextlib.contextmanager
def experts_as_one_op(module: torch.nn.Module, example_inputs: tuple) -> Iterator[list[torch.nn.Module]]:
    """While torch.export runs: each experts module of `module` called as ``dse::moe_experts``
    with the token counts per expert the example inputs route (one eager call records them).
    Yields the experts modules in the order export calls them, for `expand_experts`."""
    experts = [m for m in module.modules() if is_experts(m)]
    if not experts:
        yield []
        return
    recorded: dict[int, list[list[int]]] = {id(m): [] for m in experts}

    def recording(self, hidden, top_k_index, top_k_weights, *args, **kwargs):
        counts = torch.bincount(top_k_index.reshape(-1), minlength=self.num_experts)[:self.num_experts]
        recorded[id(self)].append([int(c) for c in counts])
        return type(self).forward(self, hidden, top_k_index, top_k_weights, *args, **kwargs)

    order: list[torch.nn.Module] = []

    def marked(self, hidden, top_k_index, top_k_weights):
        order.append(self)
        calls = recorded[id(self)]
        return torch.ops.dse.moe_experts(hidden, top_k_index, top_k_weights, calls[(sum(m is self for m in order) - 1) % len(calls)])

    try:
        for m in experts:
            m.forward = types.MethodType(recording, m)
        with torch.no_grad():
            module(*example_inputs)
        for m in experts:
            m.forward = types.MethodType(marked, m)
        yield order
    finally:
        for m in experts:
            m.__dict__.pop("forward", None)





def _expert_weights(module: torch.nn.Module) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(gate_up or up [E, N, H], down [E, H, I], their biases or None) as linear weights
    [out, in] per expert, gate rows first (an interleaved gate_up de-interleaved offline)."""
    def linear(weight):
        w = weight.detach().float().numpy()
        return np.ascontiguousarray(w.transpose(0, 2, 1) if module.is_transposed else w)

    up = linear(module.gate_up_proj if module.has_gate else module.up_proj)
    up_bias = None
    if module.has_bias:
        up_bias = (module.gate_up_proj_bias if module.has_gate else module.up_proj_bias).detach().float().numpy()
    if module.has_gate and not module.is_concatenated:  # [gate0, up0, gate1, ...] -> [gate..., up...]
        order = np.concatenate([np.arange(0, up.shape[1], 2), np.arange(1, up.shape[1], 2)])
        up = np.ascontiguousarray(up[:, order])
        up_bias = None if up_bias is None else np.ascontiguousarray(up_bias[:, order])
    down = linear(module.down_proj)
    down_bias = module.down_proj_bias.detach().float().numpy() if module.has_bias else None
    return up, down, up_bias, down_bias


def unsupported_reason(module: torch.nn.Module) -> str | None:
    """Why an experts module cannot be expanded (None: it can)."""
    from transformers.integrations.moe import _default_apply_gate

    if getattr(module, "has_post_expert_norm", False):
        return "experts with a post-expert norm"
    if module.has_gate and type(module)._apply_gate is not _default_apply_gate:
        return f"experts with their own gating ({type(module).__name__}._apply_gate)"
    act = getattr(module.config, "hidden_act", None)
    if act not in _ACTIVATIONS:
        return f"experts activation {act!r} (supported: {', '.join(sorted(_ACTIVATIONS))})"
    return None


def expand_experts(builder: Any, node: Any, module: torch.nn.Module, inputs: list[str], output: TensorSpec,
                   source: str) -> None:
    """The experts op as graph ops (module docstring), appended to the capture builder's
    ops; its last index_add writes `output`. Experts the recorded routing leaves empty get
    no ops."""
    hidden, index, weights = inputs
    counts = [int(c) for c in node.args[3]]
    top_k = builder.tensors[index].shape[-1]
    tokens, width = builder.tensors[hidden].shape
    dtype = builder.tensors[hidden].dtype
    up, down, up_bias, down_bias = _expert_weights(module)
    act_kind, act_attrs = _ACTIVATIONS[module.config.hidden_act]
    layer = node.name
    structure = {"layer": layer, "experts": len(counts), "top_k": top_k}

    def tensor(name, shape, dtype=dtype):
        builder.tensors[name] = TensorSpec(name, tuple(shape), dtype)
        return name

    def weight(name, array):
        array = np.ascontiguousarray(array, dtype=np.float32)
        builder.weights[name] = array
        builder.constants.add(name)
        return tensor(name, array.shape, "float32")

    def emit(name, kind, args, shape, attrs, dtype=dtype):
        out = tensor(name, shape, dtype)
        counts_ = count_op(kind, attrs, [builder.tensors[n] for n in args], builder.tensors[out], builder.constants)
        builder.ops.append(Op(name, kind, list(args), [out], attrs, source, counts_))
        return out

    def linear(name, x, w, b, rows):
        args = [x, weight(f"{name}_weight", w)] + ([weight(f"{name}_bias", b)] if b is not None else [])
        attrs = {"M": rows, "N": w.shape[0], "K": w.shape[1], "batch": 1, "has_bias": b is not None}
        return emit(name, "linear", args, (rows, w.shape[0]), attrs)

    acc = weight(f"{layer}_zeros", np.zeros((tokens, width), dtype=np.float32))
    hit = [e for e, n in enumerate(counts) if n]
    for e in hit:
        n, p = counts[e], f"{layer}_e{e}"
        routed = {**structure, "expert": e, "count": n}
        tok = emit(f"{p}_tokens", "moe_tokens", [index], (n,), dict(routed), "int64")
        x = emit(f"{p}_rows", "index", [hidden, tok], (n, width), {"positions": [0], "rank": 1})
        h = linear(f"{p}_up", x, up[e], None if up_bias is None else up_bias[e], n)
        if module.has_gate:
            inner = up.shape[1] // 2
            gate = emit(f"{p}_gate", "slice", [h], (n, inner), {"dim": 1, "start": 0, "end": inner, "step": 1})
            lin = emit(f"{p}_lin", "slice", [h], (n, inner), {"dim": 1, "start": inner, "end": 2 * inner, "step": 1})
            h = emit(f"{p}_mix", "mul", [emit(f"{p}_act", act_kind, [gate], (n, inner), dict(act_attrs)), lin],
                     (n, inner), {})
        else:
            h = emit(f"{p}_act", act_kind, [h], (n, up.shape[1]), dict(act_attrs))
        y = linear(f"{p}_down", h, down[e], None if down_bias is None else down_bias[e], n)
        w = emit(f"{p}_weights", "moe_weights", [index, weights], (n, 1), dict(routed), builder.tensors[weights].dtype)
        y = emit(f"{p}_scaled", "mul", [y, w], (n, width), {})
        last = e == hit[-1]
        acc = emit(output.name if last else f"{p}_sum", "index_add", [acc, tok, y], (tokens, width),
                   {**routed, "dim": 0})


__all__ = ["experts_as_one_op", "expand_experts", "is_experts", "unsupported_reason"]
