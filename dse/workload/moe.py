"""Mixture-of-experts layers as a structure of the graph: the router's choice (top-k) and,
per expert, its matmuls over the tokens routed to it.

transformers' MoE layers (Mixtral, Qwen2-MoE, OLMoE, ...) route with ``topk`` and run their
experts as one ``experts(hidden, top_k_index, top_k_weights)`` call whose body (``sort``,
``histc``, ``cumsum``, a grouped matmul over data-dependent offsets) has no static shape per
expert. Capture (`dse.workload.moe_capture`) records the routing of the recipe's example
inputs with one eager call, then exports each experts call as one op (``dse::moe_experts``) that carries the
recorded token count per expert, and expands it into plain graph ops:

    tokens_e  = moe_tokens(top_k_index)            the token ids routed to expert e (core)
    x_e       = index(hidden, tokens_e)            their rows (core gather)
    gate, up  = linear(x_e, W_gate_up[e]) split    matrix Ball, n_e rows
    y_e       = linear(act(gate) * up, W_down[e])  matrix Ball
    out       = index_add(out, tokens_e, y_e * moe_weights(top_k_index, top_k_weights))

so each expert's matmuls reach the matrix Ball over its own n_e rows, quantized and planned
as any linear. The routing is data-dependent: ``moe_tokens`` computes the token ids from the
router's output at run time and fails loudly when they are not the recorded count (the
emulator follows the captured inputs' routing exactly). `moe_layers` reads the structure
back from any graph of the pipeline (quantize inserts ops inside an expert's chain).
This module reads graphs only (no torch).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from dse.workload.graph import ROUTING_KINDS, Graph


@dataclass
class Expert:
    index: int
    count: int  # tokens routed to it by the recorded inputs
    ops: list[str] = field(default_factory=list)  # its chain, gather to scaled output, in graph order


@dataclass
class MoeLayer:
    name: str
    experts: int
    top_k: int
    tokens: int  # tokens the layer routes (each to top_k experts)
    routed: list[Expert]  # the experts the recorded inputs reach, in order

    @property
    def counts(self) -> list[int]:
        got = {x.index: x.count for x in self.routed}
        return [got.get(e, 0) for e in range(self.experts)]


def moe_layers(graph: Graph) -> list[MoeLayer]:
    """The MoE layers of a graph (any stage of the pipeline). An expert's ops: those that
    follow its token gather (moe_tokens) and lead to its index_add, with its moe_weights
    (a quantize step's ops inside the chain included)."""
    producers = graph.producers()
    consumers = graph.consumers()
    layers: dict[str, MoeLayer] = {}
    for op in graph.ops:
        if op.kind == "moe_tokens":
            a = op.attrs
            layer = layers.setdefault(a["layer"], MoeLayer(a["layer"], a["experts"], a["top_k"],
                                                           graph.tensors[op.inputs[0]].shape[0], []))
            layer.routed.append(Expert(a["expert"], a["count"]))
    for op in graph.ops:
        if op.kind != "moe_tokens":
            continue
        end = next(o for o in graph.ops if o.kind == "index_add" and o.attrs["layer"] == op.attrs["layer"]
                   and o.attrs["expert"] == op.attrs["expert"])
        after, stack = set(), [op]
        while stack:
            for user in consumers.get(stack.pop().outputs[0], []):
                if user.name not in after and user is not end:
                    after.add(user.name)
                    stack.append(user)
        before, stack = set(), [end.inputs[2]]
        while stack:
            producer = producers.get(stack.pop())
            if producer is not None and producer.name not in before:
                before.add(producer.name)
                stack.extend(producer.inputs)
        chain = (after & before) | {op.name, end.name} | {
            o.name for o in graph.ops if o.kind == "moe_weights" and o.name in before}
        expert = next(x for x in layers[op.attrs["layer"]].routed if x.index == op.attrs["expert"])
        expert.ops = [o.name for o in graph.ops if o.name in chain]
    return list(layers.values())


# --- a declared routing (the workload's `routing`, costed by dse.analytical.moe) ---

ROUTINGS = "balanced, measured or skew:<s> (s a number >= 0: expert e gets tokens in proportion to 1 / (e + 1)^s)"
_SKEW = re.compile(r"skew:(?P<s>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")


@dataclass(frozen=True)
class Routing:
    kind: str  # "measured" | "balanced" | "skew"
    skew: float = 0.0

    def __str__(self) -> str:
        return f"skew:{self.skew:g}" if self.kind == "skew" else self.kind


def parse_routing(text: str) -> Routing:
    """A routing's text as a Routing; ValueError naming what is allowed."""
    if text in ("measured", "balanced"):
        return Routing(text)
    match = _SKEW.fullmatch(str(text))
    if match is None or not math.isfinite(float(match["s"])):
        raise ValueError(ROUTINGS)
    return Routing("skew", float(match["s"]))


__all__ = ["ROUTINGS", "Routing", "parse_routing", "ROUTING_KINDS", "Expert", "MoeLayer", "moe_layers"]
