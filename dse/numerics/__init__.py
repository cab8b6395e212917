"""Numerics: emulator outputs against PyTorch.

* Against the graph's own PyTorch reference (``Graph.trace``; on a quantized graph that is
  the quantized reference of `dse.frontend.quantize`), op by op: every integer tensor
  must be equal bit for bit, and the first op whose output bits differ is named.
* Against the float PyTorch module: every output within the declared tolerance
  (``max |emulated - module| <= tolerance * max |module|``).
* The *unmodified graph* check lowers and emulates the captured graph before any frontend
  step and holds it to the same comparison: when it passes and the stepped graph fails,
  the step (not the lowering) is to blame.

:func:`emulate_recipe` runs the whole chain: capture -> steps -> lowering -> emulator ->
comparison.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from emulator.coreops import paired_blocks

from ..workload.graph import Graph

INT_DTYPES = ("int8", "int16", "int32", "int64", "uint8")


@dataclass
class OpCheck:
    name: str
    kind: str
    dtype: str
    bit_exact: bool
    max_abs_error: float


@dataclass
class OutputCheck:
    """One graph output checked on its own (a named part of the model's result: logits, a KV
    cache), so row order, softmax and cache updates are not hidden in one figure."""

    name: str  # the graph's tensor
    part: str  # the model's name for it (its recipe's ``OUTPUTS``), else the tensor's
    shape: tuple[int, ...]
    bit_exact: bool  # equal, bit for bit, to the graph's own reference
    max_abs_error: float
    max_rel_error: float  # max abs error / max |reference|
    tolerance: float
    within_tolerance: bool  # max_abs_error <= tolerance * max |reference|
    against: str  # "float module" (PyTorch's module) or "graph reference" (the graph's own trace)

    def line(self) -> str:
        """The figures on one line (`dse emulate`, the unmodified-graph check)."""
        return (f"{self.part}{'' if self.part == self.name else f' ({self.name})'}: "
                f"{'bit-exact' if self.bit_exact else 'bits differ'}; vs {self.against} max abs "
                f"{self.max_abs_error:.3g}, rel {self.max_rel_error:.3g}, tolerance {self.tolerance:g}: "
                f"{'within' if self.within_tolerance else 'BEYOND'}")


@dataclass
class Verdict:
    passed: bool
    integer_bit_exact: bool  # every integer tensor equal to the reference, bit for bit
    outputs_bit_exact: bool  # every graph output equal to the graph's reference, bit for bit
    first_differing_op: str | None
    integer_tensors: int
    max_abs_error: float  # outputs vs the float module
    max_rel_error: float
    tolerance: float
    outputs_within_tolerance: bool
    reference: str  # "quantized" or "float"
    ops: list[OpCheck] = field(default_factory=list)
    unmodified: dict | None = None  # the unmodified-graph check, when run (`unmodified_check`)
    outputs: list[OutputCheck] = field(default_factory=list)  # every graph output on its own

    def to_dict(self, ops: bool = False) -> dict[str, Any]:
        d = asdict(self)
        if not ops:
            d.pop("ops")
        return d

    def summary(self) -> str:
        s = ("PASS" if self.passed else "FAIL") + f" ({self.reference} reference: "
        s += ("integer path bit-exact" if self.integer_bit_exact else "integer path DIFFERS") + "; "
        s += f"outputs vs float PyTorch max abs {self.max_abs_error:.3g}, rel {self.max_rel_error:.3g} " \
             f"(tolerance {self.tolerance:g}))"
        if self.first_differing_op:
            s += f"; first differing op: {self.first_differing_op}"
        return s


def unmodified_check(stepped: Verdict, base: Verdict) -> dict:
    """The unmodified-graph check (`base`: the captured graph before any frontend step,
    lowered and emulated like the stepped one): it fails only when its integer path differs
    or an output is beyond its tolerance - float rounding within tolerance is no lowering
    bug, whichever op's bits differ first - and then blames the lowering; when it holds and
    the stepped graph fails, it blames the step. Its figures come with it."""
    passed = base.integer_bit_exact and all(o.within_tolerance for o in base.outputs)
    return {"passed": passed,
            "blame": "lowering" if not passed else ("step" if not stepped.passed else None),
            "max_abs_error": max((o.max_abs_error for o in base.outputs), default=0.0),
            "max_rel_error": max((o.max_rel_error for o in base.outputs), default=0.0),
            "tolerance": max((o.tolerance for o in base.outputs), default=base.tolerance),
            "first_differing_op": base.first_differing_op,
            "outputs": [asdict(o) for o in base.outputs]}


def unmodified_summary(check: dict) -> str:
    """`unmodified_check`'s verdict and figures on one line."""
    s = (f"{'PASS' if check['passed'] else 'FAIL'}: outputs vs PyTorch max abs {check['max_abs_error']:.3g}, "
         f"rel {check['max_rel_error']:.3g} (tolerance {check['tolerance']:g})")
    if check["first_differing_op"]:
        s += f"; bits first differ at op {check['first_differing_op']}" + (
            " (float rounding within tolerance)" if check["passed"] else "")
    return s + f"; blame: {check['blame'] or 'none'}"


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


ERR_CHUNK = 1 << 22  # elements: the float64 temporaries of `_err` stay at tens of MB


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether two arrays of one shape and dtype hold the same bits (floats compared as
    their bits: NaN equals itself, -0.0 not 0.0), a block at a time, on views: no copy of
    a strided view and no whole-tensor temporary (an attention's scores are GBs)."""
    u = f"u{got.dtype.itemsize}" if got.dtype.kind == "f" else None
    for x, y in paired_blocks(got, want, ERR_CHUNK):
        if u is not None:
            x, y = x.view(u), y.view(u)
        if not np.array_equal(x, y):
            return False
    return True


def _any_nan(a: np.ndarray) -> bool:
    """Whether a float array holds a NaN, a block at a time (no whole-tensor mask)."""
    return any(np.isnan(x).any() for x, _ in paired_blocks(a, a, ERR_CHUNK))


def _err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| in float64 (equal values, infinities included, differ by 0; a NaN
    on either side by inf), a slice at a time: a real layer's tensors are hundreds of MB
    and would take several float64 copies each."""
    g, w = got.reshape(-1), want.reshape(-1)
    worst = 0.0
    for start in range(0, g.size, ERR_CHUNK):
        gc, wc = g[start:start + ERR_CHUNK].astype(np.float64), w[start:start + ERR_CHUNK].astype(np.float64)
        with np.errstate(invalid="ignore"):
            d = np.where(gc == wc, 0.0, np.abs(gc - wc))
        worst = max(worst, float(np.max(np.where(np.isnan(d), np.inf, d))))
    return worst


def compare(graph: Graph, lowered, image: np.ndarray, reference: dict[str, torch.Tensor],
            expected: list | None = None, tolerance: float = 1e-5, reference_kind: str = "quantized",
            parts: list[str] | None = None) -> Verdict:
    """Every op's emulated output (read from the final DRAM `image`) against `reference`
    (tensor name -> value), and the graph outputs against the float module's `expected`;
    each output also on its own (`OutputCheck`, named by `parts`: the model's names of its
    outputs), against `expected` where given, else against `reference`."""
    fused = getattr(lowered, "fused", frozenset())
    ops = [check_op(op, graph, lowered, image, reference) for op in graph.ops if op.outputs[0] not in fused]
    return verdict(graph, lowered, image, ops, reference, expected, tolerance, reference_kind, parts)


def check_op(op, graph: Graph, lowered, image: np.ndarray, reference) -> OpCheck:
    """One op's emulated output, read from `image` (the final one, or the image as the op's
    closing BARRIER left it: `dse.numerics.boundary`), against its `reference` value."""
    name = op.outputs[0]
    spec = graph.tensors[name]
    want = reference[name].numpy() if isinstance(reference[name], torch.Tensor) else np.asarray(reference[name])
    grid = _tile_grid(lowered, image, name, want.shape)
    if grid is not None:  # a blocked accumulator compared tile by tile, not copied row-major first
        got, want_as_got = grid, want.reshape(grid.shape)
    else:
        got, want_as_got = lowered.read(image, name, copy=False), want  # read only: no copy of GBs
    dtype = got.dtype
    same = got.shape == want_as_got.shape and _same_bits(got, want_as_got.astype(dtype, copy=False))
    if same and dtype == want.dtype:  # what `_err` gives equal bits, without its float64 pass
        err = math.inf if dtype.kind == "f" and _any_nan(want) else 0.0  # equal bits: equal NaNs
    else:
        if grid is not None:
            got = lowered.read(image, name, copy=False)
        err = _err(got, want) if got.shape == want.shape else math.inf
    # the reference let go before the next op's is computed (a streamed reference holds only
    # what later ops read: an attention's values are GBs each): the caller holds none of it
    return OpCheck(op.name, op.kind, spec.dtype, bool(same), err)


def verdict(graph: Graph, lowered, image: np.ndarray, ops: list[OpCheck], reference, expected: list | None = None,
            tolerance: float = 1e-5, reference_kind: str = "quantized", parts: list[str] | None = None) -> Verdict:
    """The verdict of the op checks `ops` (graph order, `check_op`) and of the graph outputs,
    read from the final `image`, as `compare` gives it."""
    first = None
    int_ok, n_int = True, 0
    for check in ops:
        if check.dtype in INT_DTYPES:
            n_int += 1
            int_ok &= check.bit_exact
        if not check.bit_exact and first is None:
            first = check.name
    producers = graph.producers()
    by_op = {c.name: c for c in ops}
    out_exact = all(by_op[producers[n].name].bit_exact for n in graph.outputs if n in producers)
    expected = list(expected or [])
    outputs = []
    for i, name in enumerate(graph.outputs):
        check = by_op.get(producers[name].name) if name in producers else None
        against = "float module" if i < len(expected) else "graph reference"
        want = expected[i] if i < len(expected) else reference[name]
        w = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
        got = lowered.read(image, name, copy=False)  # read only: no copy of GBs
        same_shape = got.shape == w.shape
        if not same_shape:
            e, scale = math.inf, 0.0
        elif against == "graph reference" and check is not None:
            e = check.max_abs_error  # computed above, against this very reference
        else:
            e = _err(got, w)
        if same_shape:
            scale = float(np.max(np.abs(w.astype(np.float64)))) if w.size else 0.0
        rel = e / scale if scale > 0 else (0.0 if e == 0 else math.inf)
        outputs.append(OutputCheck(name, parts[i] if parts and i < len(parts) else name, tuple(w.shape),
                                   True if check is None else check.bit_exact, e, rel, tolerance,
                                   same_shape and e <= tolerance * max(scale, 1e-30), against))
    # The verdict's figures: the outputs against the float module (`expected`), else against
    # the graph's reference; every output must be within tolerance of what it is held to.
    module = [o for o in outputs if o.against == "float module"] or outputs
    max_abs = max((o.max_abs_error for o in module), default=0.0)
    max_rel = max((o.max_rel_error for o in module), default=0.0)
    within = all(o.within_tolerance for o in outputs)
    # Float tensors computed on the core may differ from the reference in the last bits
    # only if an implementation differs; hold them to the float tolerance relative to the
    # reference output, the integer ones to equality.
    passed = int_ok and within
    return Verdict(passed, int_ok, out_exact, first, n_int, max_abs, max_rel, tolerance, within, reference_kind,
                   ops, outputs=outputs)


def _tile_grid(lowered, image: np.ndarray, name: str, shape) -> np.ndarray | None:
    """A blocked accumulator of logical `shape` whose rows and columns fill its tiles, as a
    view (batch, Mt, tm, Nt, tn) of the image (what the logical (..., M, N) value reshapes
    to); None for any other tensor."""
    loc = getattr(lowered, "locs", {}).get(name)
    b = None if loc is None else loc.blocked
    if b is None or tuple(loc.shape) != tuple(shape) or (b.M, b.N) != (b.Mt * b.tm, b.Nt * b.tn) \
            or b.batch * b.M * b.N != math.prod(shape):
        return None

    return dram_view(image, loc.padded_view())


def graph_reference(graph: Graph, inputs) -> dict[str, torch.Tensor]:
    return graph.trace(*inputs)


__all__ = ["OpCheck", "OutputCheck", "Verdict", "check_op", "compare", "graph_reference", "unmodified_check",
           "unmodified_summary", "verdict"]

from .run import EmulationReport, emulate_graph, emulate_recipe  # noqa: E402
from ..plan.memory import dram_view

__all__ += ["EmulationReport", "emulate_graph", "emulate_recipe"]
