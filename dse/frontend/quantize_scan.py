"""The quantize step's rule for a scan (dse/workload/scan.py): its recurrent product made
an int8 product on the matrix Ball, per step.

    hq  = quantize(h, s_h)        s_h = fp32(127 / t) over h's values in the float trace
                                  (every step's, and the initial state's), by the step's
                                  calibration rule
    acc = linear(hq, wq)          wq = the recurrent weight, int8, one scale s_w (absmax)
    r   = dequantize(acc, m)      m = fp32(1 / (s_h * s_w)), as any product's
The cell stays float on the core. A loop found in the captured graph (Mamba's selective
scan, `dse.workload.reroll`) keeps its step float on the core: its per-step products are
a few multiply-adds a row (state x C), not worth an int8 round trip. The scan keeps being one op: its attrs gain ``h_scale``
and ``deq_scale``, its weight input becomes the int8 copy.
"""

from __future__ import annotations

import numpy as np


def quantize_scan(quantizer, op, calibrate, quantize_array) -> None:
    """Rewrite the scan `op` through the quantize step's `quantizer`, with its `calibrate`
    and `quantize_array` (the step's own rules, handed in)."""
    graph, rw = quantizer.graph, quantizer.rw
    H = op.attrs["hidden"]
    states = quantizer.values[op.outputs[0]].numpy()[..., :H]
    initial = np.asarray(graph.weights[op.inputs[1]])[..., :H]
    h = np.concatenate([states.reshape(-1), initial.reshape(-1)])
    s_h = calibrate(h, None, "tensor", quantizer.calibration, quantizer.percentile)
    w = graph.weights[op.inputs[2]]
    s_w = calibrate(w, None, "tensor")
    wq = rw.weight(f"{op.inputs[2]}_int8", quantize_array(w, s_w))
    deq = float(np.float32(1.0 / (float(s_h.values[0]) * float(s_w.values[0]))))
    inputs = [rw.get(n) for n in op.inputs]
    inputs[2] = wq
    rw.keep(op, inputs=inputs, attrs={**op.attrs, "h_scale": float(s_h.values[0]), "deq_scale": deq})
    quantizer.products += 1


__all__ = ["quantize_scan"]
