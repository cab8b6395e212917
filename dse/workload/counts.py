"""Source-derived counts of one op: what the model asks for, before any mapping.

Rules (one place, so the analytical model and reports agree on what a count means):
- macs: linear and matmul only, M * N * K * batch.
- other_ops: one per output element for elementwise ops and activations; the bias
  add of a linear / addmm counts one per output element too; layout ops count none.
- bytes_read / bytes_written: each distinct input tensor read once, the output
  written once, at its dtype's itemsize. A reshape is metadata only (0 bytes); a
  permute moves the whole tensor (read + write).
- weight_bytes: bytes of the inputs that are constants (parameters, buffers, lifted
  constants, or a layout op applied to one of those).
"""

from __future__ import annotations

from dse.workload.graph import ACTIVATION_KINDS, BINARY_KINDS, MATMUL_KINDS, OpCounts, TensorSpec


def count_op(
    kind: str,
    attrs: dict,
    inputs: list[TensorSpec],
    output: TensorSpec,
    constants: set[str],
) -> OpCounts:
    distinct = list({spec.name: spec for spec in inputs}.values())
    weight_bytes = sum(spec.nbytes for spec in distinct if spec.name in constants)
    if kind == "reshape":
        return OpCounts(weight_bytes=weight_bytes)
    bytes_read = sum(spec.nbytes for spec in distinct)
    macs = other_ops = 0
    if kind in MATMUL_KINDS:
        macs = attrs["M"] * attrs["N"] * attrs["K"] * attrs["batch"]
        if attrs.get("has_bias"):
            other_ops = attrs["M"] * attrs["N"] * attrs["batch"]
    elif kind in BINARY_KINDS or kind in ACTIVATION_KINDS:
        other_ops = output.numel
    return OpCounts(
        macs=macs,
        other_ops=other_ops,
        bytes_read=bytes_read,
        bytes_written=output.nbytes,
        weight_bytes=weight_bytes,
    )
