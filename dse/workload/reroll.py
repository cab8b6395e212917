"""Loops that torch.export unrolled, found again in the captured graph and made ONE `scan`
op each (dse/workload/scan.py), so a sequence of T steps is a loop, not T copies.

A Python loop over time steps (Mamba's selective scan in transformers' torch path:
``state = dA[:, :, t] * state + dBu[:, :, t]; y_t = state @ C[:, t]``, then a ``stack``)
reaches the graph as T copies of the step's ops, each reading slices [t] of some whole-
sequence tensors and the state the copy before left, and a ``stack`` of their outputs.
`reroll` recognises that shape and checks it strictly before replacing it:

* the ``stack``'s T >= 3 inputs y_0..y_{T-1}; step i's ops are the ancestors of y_i that are
  no ancestor of an earlier y (step 0's: the ancestors of y_0 that are none of the
  sequence, invariant or initial-state tensors' ancestors);
* every step, described op by op (kind, attrs, and per input: an op of the same step, an
  op of the step before - a state - or a tensor from outside), is the description of step
  2, except that a ``select`` reads index t of an outside tensor: a sequence input, read
  in order t = 0..T-1 along one dim;
* nothing outside reads a step's tensor but the ``stack`` (y_i) and the next step.

It becomes: a ``permute`` bringing each sequence input's time dim first (where it is not),
one ``scan`` op (its step graph recorded in its attrs: the step's ops, the selects become
the step's inputs), and a ``permute`` taking the stacked output's time dim back where the
``stack`` put it. Anything else is left as captured (still correct, just unrolled).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.workload.counts import count_op
from dse.workload.graph import Graph, Op, TensorSpec
from dse.workload.scan_body import scan_counts

MIN_STEPS = 3


def reroll(graph: Graph) -> Graph:
    """`graph` with each recognised unrolled loop as one scan op (the graph itself when none)."""
    if not any(op.kind in ("stack", "where") for op in graph.ops):
        return graph
    graph = _stacks_from_writes(_without_dead(graph))
    while True:
        for op in graph.ops:
            if op.kind == "stack" and len(op.inputs) >= MIN_STEPS and len(set(op.inputs)) == len(op.inputs):
                loop = _Loop.find(graph, op)
                if loop is not None:
                    graph = loop.replace()
                    break
        else:
            return graph


class _Loop:
    def __init__(self, graph: Graph, stack: Op):
        self.graph, self.stack = graph, stack
        self.producers = graph.producers()
        self.order = {op.outputs[0]: i for i, op in enumerate(graph.ops)}
        self.consumers = graph.consumers()

    @classmethod
    def find(cls, graph: Graph, stack: Op) -> "_Loop | None":
        loop = cls(graph, stack)
        return loop if loop._match() else None

    def ancestors(self, name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n in seen or n not in self.producers:
                continue
            seen.add(n)
            todo.extend(self.producers[n].inputs)
        return seen

    def describe(self, own: list[str], before: list[str]) -> list[tuple] | None:
        """Each op of a step: (kind, attrs, inputs), an input ("own", j), ("prev", k) or
        ("out", name); a select of index == the step's is ("t",)."""
        pos, prev = {n: j for j, n in enumerate(own)}, {n: k for k, n in enumerate(before)}
        out = []
        for n in own:
            op = self.producers[n]
            refs = tuple(("own", pos[i]) if i in pos else ("prev", prev[i]) if i in prev else ("out", i)
                         for i in op.inputs)
            out.append((op.kind, op.attrs, refs))
        return out

    def _match(self) -> bool:
        ys = self.stack.inputs
        T = len(ys)
        if any(y not in self.producers for y in ys):
            return False
        anc = [self.ancestors(y) for y in ys]
        seen = set(anc[0])
        owns: list[list[str]] = [[]]
        for i in range(1, T):
            own = sorted(anc[i] - seen, key=self.order.get)
            seen |= anc[i]
            owns.append(own)
        # ops of weights alone first read in step 1 (RWKV's -exp(time_decay)) are the loop's
        # constants, not a step's; a constant step 0 reads and later steps do not is an
        # initial state, not one of them
        first = {i for n in anc[0] for i in self.producers[n].inputs}
        later = {i for n in owns[2] for i in self.producers[n].inputs}
        fixed = (set(self.graph.weights) | set(self.graph.inputs)) - (first - later)
        for n in owns[1]:
            op = self.producers[n]
            if op.kind not in ("select", "slice") and all(i in fixed for i in op.inputs):
                fixed.add(n)
        owns[1] = [n for n in owns[1] if n not in fixed]
        template = self.describe(owns[2], owns[1])
        if not template or any(len(owns[i]) != len(owns[2]) for i in range(1, T)):
            return False
        # a select of index t from outside is a sequence input; every other attr the same
        seq_ops = {}
        for j, (kind, attrs, refs) in enumerate(template):
            if kind == "select" and refs[0][0] == "out" and attrs.get("index") == 2:
                seq_ops[j] = (refs[0][1], attrs["dim"])
        for i in range(2, T):
            desc = self.describe(owns[i], owns[i - 1])
            for j, ((k1, a1, r1), (k2, a2, r2)) in enumerate(zip(template, desc)):
                if k1 != k2 or r1 != r2:
                    return False
                if j in seq_ops:
                    if a2.get("index") != i or a2.get("dim") != a1.get("dim"):
                        return False
                elif a1 != a2:
                    return False
        # step 1 against the template: its "prev" inputs are step 0's state ops
        desc1 = self.describe(owns[1], [])
        states: dict[int, str] = {}  # template "prev" k -> step 0's tensor at that place
        for j, ((k1, a1, r1), (kt, at, rt)) in enumerate(zip(desc1, template)):
            if k1 != kt or (j not in seq_ops and a1 != at) or (j in seq_ops and a1.get("index") != 1):
                return False
            for r_1, r_t in zip(r1, rt):
                if r_t[0] == "prev":
                    if r_1[0] != "out" or states.setdefault(r_t[1], r_1[1]) != r_1[1]:
                        return False
                elif r_1 != r_t:
                    return False
        outside = {r[1] for _, _, refs in template for r in refs if r[0] == "out"}
        pre = set().union(*(self.ancestors(n) for n in outside)) if outside else set()
        own0 = sorted(anc[0] - pre, key=self.order.get)
        initial = self._step0(own0, template, seq_ops)
        self.peeled = initial is None
        if self.peeled:
            # step 0 is not the others' shape (a loop that updates its state after its output:
            # step 1 holds iteration 0's update): it stays as captured, the scan runs 1..T-1
            # from the state step 0 left
            initial = states
            owns[0] = []
        else:
            owns[0] = own0
            if any(own0.index(states[k]) != k if states[k] in own0 else True for k in states):
                return False  # step 1 reads other tensors of step 0 than its states
        out_pos = owns[2].index(ys[2])
        if any(owns[i].index(ys[i]) != out_pos for i in range(1 if self.peeled else 0, T)):
            return False
        if template[out_pos][0] in ("linear", "matmul") or out_pos in seq_ops:
            return False  # the step's output must be a core op's (written in place)
        # nobody outside reads a step's tensor but the stack and the next step
        for i in range(1 if self.peeled else 0, T):
            allowed = set(owns[i]) | (set(owns[i + 1]) if i + 1 < T else set()) | {self.stack.outputs[0]}
            for n in owns[i]:
                if any(c.outputs[0] not in allowed for c in self.consumers.get(n, [])):
                    return False
                if n in self.graph.outputs:
                    return False
        for name, dim in set(seq_ops.values()):
            if self.graph.tensors[name].shape[dim] != T:
                return False
        self.T, self.owns, self.template, self.seq_ops, self.initial, self.out_pos = T, owns, template, seq_ops, initial, out_pos
        return True

    def _step0(self, own0: list[str], template: list[tuple], seq_ops: dict) -> dict[int, str] | None:
        """Step 0 against the template: the initial states it reads where the others read
        the step before (template "prev" k -> tensor), or None when it is not the same shape."""
        if len(own0) != len(template):
            return None
        pos0 = {n: j for j, n in enumerate(own0)}
        initial: dict[int, str] = {}
        for j, (n, (kt, at, rt)) in enumerate(zip(own0, template)):
            op = self.producers[n]
            if op.kind != kt or (j not in seq_ops and op.attrs != at) or (j in seq_ops and op.attrs.get("index") != 0):
                return None
            for name, r_t in zip(op.inputs, rt):
                if r_t[0] == "prev":
                    if name in pos0 or initial.setdefault(r_t[1], name) != name:
                        return None
                elif r_t[0] == "own":
                    if pos0.get(name) != r_t[1]:
                        return None
                elif name != r_t[1]:
                    return None
        return initial

    def replace(self) -> Graph:
        g, T = self.graph, self.T
        name = f"{self.stack.name}_scan"
        source = self.producers[self.owns[1][0]].source
        tensors = dict(g.tensors)
        new_ops: list[Op] = []
        constants = set(g.weights)

        def emit(kind, inputs, out, shape, dtype, attrs, counts=None):
            tensors[out] = TensorSpec(out, tuple(shape), dtype)
            op = Op(out, kind, list(inputs), [out], attrs, source, None)
            op.counts = counts(op) if counts else count_op(kind, attrs, [tensors[n] for n in inputs], tensors[out],
                                                          constants)
            new_ops.append(op)
            return out

        # the step graph, from step 1's ops (the template's attrs; selects of index t dropped)
        step1 = self.owns[1]
        body_name = {j: f"{name}.{j}" for j in range(len(step1))}
        states = sorted(self.initial)
        state_name = {k: f"{name}.state{k}" for k in states}
        seqs = sorted(self.seq_ops)
        specs: dict[str, Any] = {}
        body: list[list] = []
        for j, (kind, attrs, refs) in enumerate(self.template):
            spec = g.tensors[step1[j]]
            specs[body_name[j]] = [list(spec.shape), spec.dtype]
            if j in self.seq_ops:
                continue
            inputs = [body_name[r[1]] if r[0] == "own" else state_name[r[1]] if r[0] == "prev" else r[1] for r in refs]
            body.append([kind, inputs, body_name[j], dict(attrs)])
        for k in states:
            spec = g.tensors[step1[k]]
            specs[state_name[k]] = [list(spec.shape), spec.dtype]
        invariant = sorted({r[1] for j, (_, _, refs) in enumerate(self.template) if j not in self.seq_ops
                            for r in refs if r[0] == "out"}, key=lambda n: (n not in g.weights, n))
        # sequence inputs, time first (from index 1 when step 0 is peeled off)
        steps = T - 1 if self.peeled else T
        seq_inputs = []
        for j in seqs:
            x, dim = self.seq_ops[j]
            spec = g.tensors[x]
            if self.peeled:
                shape = tuple(n - 1 if d == dim else n for d, n in enumerate(spec.shape))
                x = emit("slice", [x], f"{name}_seq{j}_rest", shape, spec.dtype,
                         {"dim": dim, "start": 1, "end": T, "step": 1})
                spec = tensors[x]
            if dim != 0:
                dims = [dim] + [d for d in range(len(spec.shape)) if d != dim]
                x = emit("permute", [x], f"{name}_seq{j}", tuple(spec.shape[d] for d in dims), spec.dtype,
                         {"dims": dims})
            seq_inputs.append(x)
        out_spec = g.tensors[self.stack.inputs[0]]
        attrs = {"steps": steps, "reverse": False, "n_seq": len(seqs), "n_state": len(states),
                 "seq": [body_name[j] for j in seqs], "state": [state_name[k] for k in states],
                 "next": [body_name[k] for k in states], "out": body_name[self.out_pos], "body": body, "specs": specs}
        dim = self.stack.attrs["dim"]
        final = self.stack.outputs[0]
        scan_out = final if dim == 0 and not self.peeled else f"{name}_out"
        emit("scan", seq_inputs + [self.initial[k] for k in states] + invariant, scan_out, (steps, *out_spec.shape),
             out_spec.dtype, attrs, counts=lambda op: scan_counts(op, tensors, constants))
        if self.peeled:  # step 0's output in front
            first = emit("reshape", [self.stack.inputs[0]], f"{name}_first", (1, *out_spec.shape), out_spec.dtype,
                         {"shape": [1, *out_spec.shape]})
            joined = final if dim == 0 else f"{name}_all"
            scan_out = emit("cat", [first, scan_out], joined, (T, *out_spec.shape), out_spec.dtype, {"dim": 0})
        if dim != 0:
            rank = len(out_spec.shape) + 1
            dims = list(range(1, dim + 1)) + [0] + list(range(dim + 1, rank))
            emit("permute", [scan_out], final, g.tensors[final].shape, out_spec.dtype, {"dims": dims})
        removed = {n for own in self.owns for n in own} | {final}
        ops = []
        for op in g.ops:
            if op.outputs[0] == final:
                ops.extend(new_ops)
            elif op.outputs[0] not in removed:
                ops.append(op)
        graph = Graph(g.name, ops, tensors, list(g.inputs), list(g.outputs), dict(g.weights))
        return _without_dead(graph)


def _position(mask: np.ndarray, shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(dim, index) when the bool constant `mask`, broadcast to `shape`, is true exactly on
    the slice [index] of one dim (of size > 1)."""
    if mask.dtype != np.bool_:
        return None
    try:
        full = np.broadcast_to(mask, shape)
    except ValueError:
        return None
    where = np.argwhere(full)
    for d, n in enumerate(shape):
        if n > 1 and len(where) == full.size // n and len(where) and (where[:, d] == where[0, d]).all():
            return d, int(where[0, d])
    return None


def _stacks_from_writes(graph: Graph) -> Graph:
    """A loop's ``out[:, t] = y_t`` (an in-place write into a buffer, each step one
    ``where(mask_t, expand(y_t), out)`` once export functionalised and decomposed it),
    writing every index 0..T-1 of one dim in order: made the ``stack`` of the y_t it is
    (the buffer's first value, fully overwritten, no longer read)."""
    producers, consumers = graph.producers(), graph.consumers()

    def write(op: Op):
        """(dim, index, y, previous buffer) of one step's write, or None."""
        if op.kind != "where" or op.attrs.get("scalars") or len(op.inputs) != 3:
            return None
        mask, value, before = op.inputs
        if mask not in graph.weights:
            return None
        out = graph.tensors[op.outputs[0]].shape
        place = _position(np.asarray(graph.weights[mask]), out)
        expand = producers.get(value)
        if place is None or expand is None or expand.kind != "expand":
            return None
        unsqueeze = producers.get(expand.inputs[0])
        d, i = place
        if unsqueeze is None or unsqueeze.kind != "reshape" or \
                graph.tensors[unsqueeze.inputs[0]].shape != out[:d] + out[d + 1:]:
            return None
        return d, i, unsqueeze.inputs[0], before

    replaced: dict[str, Op] = {}
    for op in graph.ops:
        step = write(op)
        if step is None or any(write(c) is not None and c.inputs[2] == op.outputs[0] for c in consumers[op.outputs[0]]):
            continue  # not a write, or not the chain's last
        chain, cur = [], op
        while cur is not None and (step := write(cur)) is not None:
            chain.append(step)
            nxt = producers.get(step[3])
            if nxt is None or write(nxt) is None or len(consumers[nxt.outputs[0]]) != 1:
                break
            cur = nxt
        chain.reverse()
        out = graph.tensors[op.outputs[0]].shape
        if len(chain) < MIN_STEPS or len({d for d, *_ in chain}) != 1 or \
                [i for _, i, *_ in chain] != list(range(out[chain[0][0]])):
            continue
        ys, attrs = [y for _, _, y, _ in chain], {"dim": chain[0][0]}
        counts = count_op("stack", attrs, [graph.tensors[y] for y in ys], graph.tensors[op.outputs[0]], set(graph.weights))
        replaced[op.outputs[0]] = Op(op.name, "stack", ys, list(op.outputs), attrs, op.source, counts)
    if not replaced:
        return graph
    graph = Graph(graph.name, [replaced.get(op.outputs[0], op) for op in graph.ops], dict(graph.tensors),
                  list(graph.inputs), list(graph.outputs), dict(graph.weights))
    return _without_dead(graph)


def _without_dead(graph: Graph) -> Graph:
    """Drop the ops, tensors and weights nothing reads any more."""
    while True:
        used = {n for op in graph.ops for n in op.inputs} | set(graph.outputs)
        dead = [op for op in graph.ops if op.outputs[0] not in used]
        if not dead:
            break
        graph.ops = [op for op in graph.ops if op.outputs[0] in used]
    live = used | set(graph.inputs) | {op.outputs[0] for op in graph.ops}
    graph.tensors = {n: s for n, s in graph.tensors.items() if n in live}
    graph.weights = {n: w for n, w in graph.weights.items() if n in used}
    return graph


__all__ = ["MIN_STEPS", "reroll"]
