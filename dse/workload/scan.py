"""Scans: a recurrence over time steps held as ONE graph op (not seq_len unrolled copies).

    states = scan(xp[T, B, G], s0[B, S], w[G, H], b[G])        states: [T, B, S]
    states[t] = step(xp[t], states[t - 1]),  states[-1] = s0   (t = T-1 .. 0 when `reverse`)

The step is a small graph of its own, `body` (built here, read by the interpreter, the plan,
the lowering and the model alike, so they run one recurrence): the recurrent product
``r = h @ w.T + b`` then the elementwise cell ``rnn_cell(r, xp[t], s)``. Float, the product is
a float ``linear`` (on the core); once the quantize step gave the op an ``h_scale`` and an
int8 ``w`` it is ``quantize(h) -> int8 linear -> dequantize`` (the matrix Ball, per step).
The input projections of all steps (``x @ W_ih.T + b_ih``) are not in the loop: capture
hoists them into one ``linear`` over T x B rows (`dse.workload.scan_capture`).

Cells (PyTorch's gate orders): ``lstm`` (S = 2H, the state is [h | c]; gates i, f, g, o)
and ``gru`` (S = H; gates r, z, n, with b = b_hh inside the reset product as torch has it).
``rnn_cell(r, x, s)``: r = h @ w.T + b (float: one linear with its bias, as torch's cell;
quantized: dequantize(acc) + b).

This module imports no torch at load and nothing of the package but its vocabulary (the
interpreter reads it); `dse.workload.scan_body` makes the step a `Graph` with its counts.
"""

from __future__ import annotations

from typing import Any

from dse.workload.vocabulary import SCAN_KINDS, Op, OpCounts, TensorSpec

CELLS = {"lstm": 4, "gru": 3}  # gates per hidden unit


def state_size(cell: str, hidden: int) -> int:
    return 2 * hidden if cell == "lstm" else hidden


def quantized(op: Op) -> bool:
    """A scan whose recurrent product is int8 on the matrix Ball (the quantize step's)."""
    return "h_scale" in op.attrs


def body_names(op: Op) -> dict[str, str]:
    """The step graph's tensor names, prefixed by the scan's name (its weights keep theirs)."""
    n = op.name
    return {"x": f"{n}.x", "s": f"{n}.s", "h": f"{n}.h", "hq": f"{n}.hq", "acc": f"{n}.acc", "deq": f"{n}.deq",
            "r": f"{n}.r", "out": f"{n}.out"}


def step_ops(op: Op, tensors: dict[str, TensorSpec]) -> tuple[list[Op], dict[str, TensorSpec]]:
    """One time step of the scan `op`: its ops (no counts) and their tensors' specs. Its
    inputs: the step's slices of the sequence inputs, then the states (`bindings`); the
    scan's invariant inputs (weights, and activations every step reads) keep their own
    names; its outputs: the step's output, then the next states."""
    if "body" in op.attrs:
        return _recorded_ops(op, tensors)
    return _cell_ops(op, tensors)


def bindings(op: Op) -> dict[str, Any]:
    """How the scan's inputs and outputs meet its step graph: `seq` (step inputs, one per
    sequence input, in order), `state` (the states' step inputs), `invariant` (the scan's
    inputs read whole every step), `next` (the step's tensors that are the next states, in
    the order of `state`), `out` (the step's output, stacked over the steps)."""
    a = op.attrs
    if "body" in a:
        n_seq, n_state = a["n_seq"], a["n_state"]
        return {"seq": list(a["seq"]), "state": list(a["state"]), "invariant": list(op.inputs[n_seq + n_state:]),
                "next": list(a["next"]), "out": a["out"]}
    names = body_names(op)
    return {"seq": [names["x"]], "state": [names["s"]], "invariant": list(op.inputs[2:4]), "next": [names["out"]],
            "out": names["out"]}


def _recorded_ops(op: Op, tensors: dict[str, TensorSpec]) -> tuple[list[Op], dict[str, TensorSpec]]:
    """A loop found in the captured graph (`dse.workload.reroll`): its step's ops as recorded
    in the attrs (kind, inputs, output, attrs), specs from `specs`."""
    a = op.attrs
    specs = {name: TensorSpec(name, tuple(shape), dtype) for name, (shape, dtype) in a["specs"].items()}
    for name in bindings(op)["invariant"]:
        specs[name] = tensors[name]
    ops = [Op(out, kind, list(inputs), [out], dict(attrs), op.source, OpCounts()) for kind, inputs, out, attrs in a["body"]]
    return ops, specs


def _cell_ops(op: Op, tensors: dict[str, TensorSpec]) -> tuple[list[Op], dict[str, TensorSpec]]:
    """An LSTM / GRU step: inputs (x [B, G], s [B, S]), the scan's weights (w, b) by their
    own names, output the next state [B, S]."""
    a = op.attrs
    B, H, cell = a["batch"], a["hidden"], a["cell"]
    G, S = CELLS[cell] * H, state_size(cell, H)
    names = body_names(op)
    w, b = op.inputs[2], op.inputs[3]
    specs = {names["x"]: TensorSpec(names["x"], (B, G), "float32"), names["s"]: TensorSpec(names["s"], (B, S), "float32"),
             w: tensors[w], b: tensors[b]}
    ops: list[Op] = []

    def emit(kind: str, inputs: list[str], key: str, shape: tuple, dtype: str, attrs: dict) -> str:
        out = names[key]
        specs[out] = TensorSpec(out, shape, dtype)
        ops.append(Op(out, kind, inputs, [out], attrs, op.source, OpCounts()))
        return out

    h = names["s"]
    if cell == "lstm":
        h = emit("slice", [h], "h", (B, H), "float32", {"dim": 1, "start": 0, "end": H, "step": 1})
    product = {"M": B, "N": G, "K": H, "batch": 1, "has_bias": False}
    if quantized(op):
        hq = emit("quantize", [h], "hq", (B, H), "int8",
                  {"scale": a["h_scale"], "scale_axes": [], "scale_groups": [], "granularity": "tensor", "role": "A"})
        acc = emit("linear", [hq, w], "acc", (B, G), "int32",
                   {**product, "dtype": "int8", "acc_dtype": "int32", "a_granularity": "tensor",
                    "b_granularity": "tensor"})
        deq = emit("dequantize", [acc], "deq", (B, G), "float32",
                   {"scale": a["deq_scale"], "scale_axes": [], "scale_groups": []})
        r = emit("add", [deq, b], "r", (B, G), "float32", {})
    else:  # torch's own cell: linear(h, W_hh, b_hh), the bias in the product (the same bits)
        r = emit("linear", [h, w, b], "r", (B, G), "float32", {**product, "has_bias": True})
    emit("rnn_cell", [r, names["x"], names["s"]], "out", (B, S), "float32", {"cell": cell, "hidden": H})
    return ops, specs


def step_order(op: Op) -> range:
    T = op.attrs["steps"]
    return range(T - 1, -1, -1) if op.attrs.get("reverse") else range(T)


# --- the reference interpreter (torch, imported on use) ---

def run_rnn_cell(op: Op, args: list) -> Any:
    """One step's cell from its gates' two parts, r = h @ W_hh.T + b_hh and x = the hoisted
    input product, written as torch's own CPU cells (aten/native/RNN.cpp: LSTMCell, GRUCell)
    so the float scan gives PyTorch's bits."""
    import torch

    r, x, s = (a.float() for a in args)
    H = op.attrs["hidden"]
    # the same ops on the same views as torch (in place on the gates' chunks): transcendental
    # kernels round differently on a strided view than on a contiguous tensor
    gates = r.clone()
    if op.attrs["cell"] == "lstm":
        i, f, g, o = gates.add_(x).unsafe_chunk(4, 1)
        i, f, g, o = i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
        c = f.mul(s[..., H:].contiguous()).add_(i.mul(g))
        return torch.cat([o.mul(c.tanh()), c], -1)
    xr, xz, xn = x.unsafe_chunk(3, 1)
    hr, hz, hn = gates.unsafe_chunk(3, 1)
    reset = hr.add_(xr).sigmoid_()
    update = hz.add_(xz).sigmoid_()
    new = xn.add(hn.mul_(reset)).tanh_()
    return (s - new).mul_(update).add_(new)


def run_scan(op: Op, args: list, interpreters: dict) -> Any:
    """The loop, step by step, each step the body's ops through the graph's `interpreters`
    (the very functions the emulator's core ops and the frontend's checks run)."""
    import torch

    tensors = {name: TensorSpec(name, tuple(v.shape), str(v.dtype).removeprefix("torch."))
               for name, v in zip(op.inputs, args)}
    ops, _ = step_ops(op, tensors)
    b = bindings(op)
    n_seq, n_state = len(b["seq"]), len(b["state"])
    seqs, states, invariant = args[:n_seq], list(args[n_seq:n_seq + n_state]), args[n_seq + n_state:]
    outs: list = [None] * op.attrs["steps"]
    for t in step_order(op):
        values = dict(zip(b["invariant"], invariant))
        values.update({name: seq[t].contiguous() for name, seq in zip(b["seq"], seqs)})
        values.update(zip(b["state"], states))
        for o in ops:
            # each step value a tensor of its own, as the emulator's buffers are (a kernel
            # rounds a strided view otherwise than a contiguous one: torch's LSTM reads h whole)
            values[o.outputs[0]] = interpreters[o.kind](o, [values[n] for n in o.inputs]).contiguous()
        outs[t] = values[b["out"]]
        states = [values[n] for n in b["next"]]
    return torch.stack(outs)


__all__ = ["CELLS", "SCAN_KINDS", "bindings", "body_names", "quantized", "run_rnn_cell", "run_scan", "state_size",
           "step_ops", "step_order"]
