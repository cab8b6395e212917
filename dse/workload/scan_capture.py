"""`aten.lstm` / `aten.gru` captured as hoisted input projections and one `scan` op a
layer and direction (dse/workload/scan.py).

Per layer l and direction d, time-major throughout ([T, B, .]):

    xp     = linear(x, W_ih, b_ih)              [T, B, G]   all steps in one GEMM (hoisted:
                                                            no step reads another's input)
    states = scan(xp, s0, W_hh, b_hh)           [T, B, S]   the recurrence, one op
    h      = slice(states, 2, 0, H)  (LSTM)     [T, B, H]   the state is [h | c]

two directions concatenated on the last dim, layers chained, a batch-first input and output
permuted once at each end. The initial state must be a constant (zeros when the model
passes none, as Sequencer2d's LSTMs and most models do); only the output sequence is read
(h_n / c_n read by the model: refused by name). Dropout between layers only in training.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dse.workload.counts import count_op
from dse.workload.graph import Op, TensorSpec
from dse.workload.scan import CELLS, state_size
from dse.workload.scan_body import scan_counts

RNN_TARGETS = ("lstm.input", "gru.input")


def handler_attrs(node) -> dict[str, Any] | str:
    """The aten node's settings, or why its form is not supported."""
    mode = "lstm" if str(node.target).startswith("aten.lstm") else "gru"
    x, hx, params, has_biases, layers, dropout, train, bidirectional, batch_first = node.args[:9]
    if train and dropout:
        return "recurrent dropout in training mode (call load() in eval mode)"
    hx = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    params = list(params)
    dirs = 2 if bidirectional else 1
    if len(params) != int(layers) * dirs * (4 if has_biases else 2):
        return "projected LSTM (proj_size)"
    return {"mode": mode, "layers": int(layers), "dirs": dirs, "batch_first": bool(batch_first),
            "has_biases": bool(has_biases), "states": len(hx), "params": len(params)}


class ScanEmitter:
    """Emits the ops of one recurrent node into the capture's builder."""

    def __init__(self, builder, node, source: str):
        self.b, self.node, self.source = builder, node, source

    def emit(self, kind: str, inputs: list[str], shape: tuple, attrs: dict, hint: str, dtype: str = "float32") -> str:
        b = self.b
        name = f"{self.node.name}_{hint}"
        spec = TensorSpec(name, tuple(int(d) for d in shape), dtype)
        b.tensors[name] = spec
        op = Op(name, kind, inputs, [name], attrs, self.source, None)
        op.counts = scan_counts(op, b.tensors, b.constants) if kind == "scan" else count_op(
            kind, attrs, [b.tensors[n] for n in inputs], spec, b.constants)
        b.ops.append(op)
        return name

    def weight(self, hint: str, array: np.ndarray) -> str:
        b = self.b
        name = f"{self.node.name}_{hint}"
        b.tensors[name] = TensorSpec(name, tuple(array.shape), str(array.dtype))
        b.weights[name] = np.ascontiguousarray(array)
        b.constants.add(name)
        return name

    def run(self, inputs: list[str], attrs: dict) -> str | None:
        """The node's output sequence's tensor name; None with `self.reason` when refused."""
        b = self.b
        mode, dirs = attrs["mode"], attrs["dirs"]
        x, states, params = inputs[0], inputs[1:1 + attrs["states"]], inputs[1 + attrs["states"]:]
        initial = [b.weights.get(s) for s in states]
        if any(v is None for v in initial):
            self.reason = "an initial state computed by the model (only a constant one, as zeros, is supported)"
            return None
        shape = b.tensors[x].shape
        if len(shape) != 3:
            self.reason = f"an unbatched input of rank {len(shape)}"
            return None
        if attrs["batch_first"]:
            x = self.emit("permute", [x], (shape[1], shape[0], shape[2]), {"dims": [1, 0, 2]}, "time_major")
        T, B = b.tensors[x].shape[:2]
        per = 4 if attrs["has_biases"] else 2
        H = b.tensors[params[1]].shape[1]
        G = CELLS[mode] * H
        for layer in range(attrs["layers"]):
            outs = []
            for d in range(dirs):
                w_ih, w_hh, *biases = params[(layer * dirs + d) * per:(layer * dirs + d + 1) * per]
                tag = f"l{layer}{'_reverse' if d else ''}"
                I = b.tensors[x].shape[-1]
                xp = self.emit("linear", [x, w_ih] + biases[:1], (T, B, G),
                               {"M": T * B, "N": G, "K": I, "batch": 1, "has_bias": bool(biases)}, f"{tag}_xp")
                k = layer * dirs + d
                s0 = np.asarray(initial[0][k], dtype=np.float32)
                if mode == "lstm":
                    s0 = np.concatenate([s0, np.asarray(initial[1][k], dtype=np.float32)], -1)
                s0 = self.weight(f"{tag}_s0", s0)
                b_hh = biases[1] if biases else self.weight(f"{tag}_b_hh", np.zeros(G, np.float32))
                S = state_size(mode, H)
                seq = self.emit("scan", [xp, s0, w_hh, b_hh], (T, B, S),
                                {"cell": mode, "hidden": H, "steps": T, "batch": B, "reverse": bool(d)}, f"{tag}_scan")
                if mode == "lstm":
                    seq = self.emit("slice", [seq], (T, B, H), {"dim": 2, "start": 0, "end": H, "step": 1}, f"{tag}_h")
                outs.append(seq)
            x = outs[0] if dirs == 1 else self.emit("cat", outs, (T, B, dirs * H), {"dim": 2}, f"l{layer}_both")
        if attrs["batch_first"]:
            x = self.emit("permute", [x], (B, T, dirs * H), {"dims": [1, 0, 2]}, "batch_first")
        return x


def unused_state(node) -> bool:
    """h_n / c_n that the model does not read."""
    return not node.users


__all__ = ["RNN_TARGETS", "ScanEmitter", "handler_attrs", "unused_state"]
