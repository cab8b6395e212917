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

import numpy as np

from dse.workload.counts import count_op
from dse.workload.graph import ROUTING_KINDS, Graph, Op, TensorSpec


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


# --- the layer's experts at other token counts ---

def recounted(graph: Graph, layer: MoeLayer, counts: list[int], clone: bool = False) -> Graph:
    """A copy of `graph` whose `layer` routes `counts` tokens per expert: each expert's ops
    re-shaped to its rows (its gather, products, scaling), an expert given none without ops.
    An expert the graph has no ops for (its recorded routing left it empty) is, with
    `clone`, a copy of another's chain (the analytical model's: every expert has the same
    shapes, its weights stand in); else a ValueError (its weights are not in the graph)."""
    ops = {op.name: op for op in graph.ops}
    own = {x.index: x for x in layer.routed}
    missing = [e for e, n in enumerate(counts) if n and e not in own]
    if missing and not clone:
        e = missing[0]
        raise ValueError(f"{layer.name}: the router sends {counts[e]} tokens to expert {e}, which the captured "
                         "routing left empty (its weights are not in the graph): capture with inputs that reach it")
    template = layer.routed[0]
    last = ops[layer.routed[-1].ops[-1]].outputs[0]
    acc = ops[layer.routed[0].ops[-1]].inputs[0]  # the zeros the first expert's output is added to
    constants = set(graph.weights)
    tensors: dict[str, TensorSpec] = {}
    new: list[Op] = []
    hit = [e for e, n in enumerate(counts) if n]
    for e in hit:
        source = own.get(e, template)
        rename = {} if source is own.get(e) else {
            ops[name].outputs[0]: f"{ops[name].outputs[0]}@e{e}" for name in source.ops}
        for name in source.ops:
            op = ops[name]
            spec = graph.tensors[op.outputs[0]]
            if op.kind == "index_add":
                output = last if e == hit[-1] else f"{layer.name}@e{e}_sum"
                inputs = [acc, rename.get(op.inputs[1], op.inputs[1]), rename.get(op.inputs[2], op.inputs[2])]
                shape = spec.shape
                acc = output
            else:
                output = rename.get(op.outputs[0], op.outputs[0])
                inputs = [rename.get(n, n) for n in op.inputs]
                shape = (counts[e],) + spec.shape[1:]
            tensors[output] = TensorSpec(output, shape, spec.dtype)
            attrs = dict(op.attrs)
            if "count" in attrs:
                attrs.update(count=counts[e], expert=e)
            if "M" in attrs and op.kind in ("linear", "matmul"):
                attrs["M"] = counts[e]
            specs = [tensors.get(n) or graph.tensors[n] for n in inputs]
            new.append(Op(f"{name}@e{e}" if rename else name, op.kind, inputs, [output], attrs, op.source,
                          count_op(op.kind, attrs, specs, tensors[output], constants)))
    chain = {name for x in layer.routed for name in x.ops}
    first = next(k for k, op in enumerate(graph.ops) if op.name in chain)
    kept = [op for op in graph.ops if op.name not in chain]
    out = Graph(graph.name, kept[:first] + new + kept[first:], {**graph.tensors, **tensors}, list(graph.inputs),
                list(graph.outputs), dict(graph.weights))
    used = {n for op in out.ops for n in op.inputs + op.outputs} | set(out.inputs) | set(out.outputs)
    out.tensors = {name: spec for name, spec in out.tensors.items() if name in used}
    out.weights = {name: w for name, w in out.weights.items() if name in used}
    return out


def follow_routing(graph: Graph, inputs) -> Graph:
    """`graph` with each MoE layer's token counts those its own router gives on `inputs`
    (a quantized stage's router may send a near-tie token elsewhere than the captured
    float module's did), layer by layer: the graph up to a layer's token gathers is run,
    its top-k indices counted, the layer re-counted (`recounted`) where they differ."""
    for layer in moe_layers(graph):
        routing = next(op for op in graph.ops if op.kind == "moe_tokens" and op.attrs["layer"] == layer.name)
        first = next(k for k, op in enumerate(graph.ops) if op is routing)
        prefix = Graph(graph.name, graph.ops[:first], graph.tensors, graph.inputs, [routing.inputs[0]], graph.weights)
        index = np.asarray(prefix.run(*inputs)[0]).reshape(-1)
        counts = np.bincount(index[index < layer.experts], minlength=layer.experts).tolist()
        if counts != layer.counts:
            graph = recounted(graph, layer, counts)
    return graph


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


__all__ = ["ROUTINGS", "Routing", "parse_routing", "follow_routing", "recounted", "ROUTING_KINDS", "Expert", "MoeLayer", "moe_layers"]
