"""The program a candidate's emulation runs, emitted once by the one path every emulation
takes (`emulate_graph`, `emulate_placed`, `emulate_spans`), and what reads it back: its
outputs at the model's shapes, its inputs by name, the op behind every instruction, the
DRAM buffers by name, and the identities a run records (program, DRAM image, weights).

`dse show c<ID> --program / --banks` and `dse replay` emit through here too, so what they
list and rerun is the program the emulator ran (its digest says so).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..lower import Infeasible, LayeredLowered, Lowered, lower, lower_layers, lower_placed
from ..lower.banks import bank_lifetimes
from ..lower.listing import bytes_digest, program_digest, program_listing
from ..lower.spans import lower_spans
from ..mapping import Candidate
from ..plan.spans import SpanError
from ..workload.graph import Graph


def _np(value) -> np.ndarray:
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value)


@dataclass
class Emitted:
    program: Any  # emulator.Program
    image: np.ndarray  # the DRAM image the run starts from (inputs and weights placed)
    candidate: Candidate  # with placement "auto" resolved: the mapping the program was built with
    # (prefix, Lowered) whose graph outputs are the run's outputs: "" for one graph, "role/" per stage
    lowereds: list[tuple[str, Lowered]]
    inputs: dict[str, np.ndarray]  # the inputs at the model's shapes, by (prefixed) graph input name
    graphs: list[Graph]
    layered: LayeredLowered | None = None
    requests: list | None = None  # the inputs of every request (`mapping.requests`)
    spans: tuple | None = None  # `lower_spans`' (staged, spans, parts, final) of a spans partition
    _labels: dict | None = field(default=None, repr=False)

    def _all(self) -> list[tuple[str, Lowered]]:
        """Every part of the program, (prefix, Lowered): a stage's ("role/"), a span's, a
        request's (their labels already name the span or request)."""
        if self.spans is not None:
            return [("", low) for low in self.spans[0].stages]
        if self.layered is not None:
            many = len(self.layered.stages) > 1
            return [(f"request {k}: " if many else "", low) for k, low in enumerate(self.layered.stages)]
        return self.lowereds

    @property
    def labels(self) -> dict[int, str]:
        """id of an instruction -> the graph op that emitted it (prefixed by its stage's role)."""
        if self._labels is None:
            own = self.spans is not None or self.layered is not None  # their labels name span or request
            self._labels = {k: ("" if own else prefix) + v for prefix, low in self._all() for k, v in low.labels.items()}
        return self._labels

    def buffers(self) -> list[tuple[int, int, str]]:
        """Every named DRAM buffer, (addr, bytes, name), by address: the graph tensors (a
        buffer several views share by its first name), and the lowering's own (packed
        operands, Bt and bias tiles, pad and im2col buffers)."""
        seen: dict[int, tuple[int, int, str]] = {}
        named: list[tuple[int, int, str]] = []
        for prefix, low in self._all():
            for name, loc in low.locs.items():
                if loc.addr not in seen:
                    seen[loc.addr] = (loc.addr, loc.nbytes, prefix + name)
            named += low.named
        return sorted(list(seen.values()) + [n for n in dict.fromkeys(named) if n[0] not in seen])

    def outputs(self, dram: np.ndarray) -> dict[str, np.ndarray]:
        """The graph outputs at the model's shapes, read from a run's final DRAM image (the
        physical buffers are padded; request 0's of several)."""
        if self.spans is not None:
            final, graph = self.spans[3], self.graphs[0]
            return {graph.outputs[0]: final.read(dram)}
        return {prefix + name: low.read(dram, name) for prefix, low in self.lowereds for name in low.graph.outputs}

    def bank_lifetimes(self):
        """Every virtual bank's lifetime (`dse.lower.banks.bank_lifetimes`): the one set of
        rows `dse show --banks`, the report and the UI show."""
        sm = self.candidate.chip.shared_memory
        return bank_lifetimes(self.program, self.labels, self.buffers(), sm.first_bank_id if sm.enabled else None)

    def listing(self):
        """The program, core by core, each instruction with its op (`dse.lower.listing`)."""
        return program_listing(self.program, self.labels)

    def digests(self) -> dict[str, str]:
        """The run's identities: sha256 of the program (`program_digest`), of the DRAM image it
        starts from, and of the graphs' weights (`weights_digest`)."""
        return {"program_sha256": program_digest(self.program), "dram_image_sha256": bytes_digest(self.image),
                "weights_sha256": weights_digest(self.graphs)}


def weights_digest(graphs: list[Graph]) -> str:
    """sha256 of the graphs' weights: every weight's name, dtype, shape and bytes, by name."""
    h = hashlib.sha256()
    for i, graph in enumerate(graphs):
        for name in sorted(graph.weights):
            value = np.ascontiguousarray(_np(graph.weights[name]))
            h.update(f"{i}/{name} {value.dtype.str} {value.shape};".encode())
            h.update(value.view(np.uint8).reshape(-1).data)
    return h.hexdigest()


def emit_graph(graph: Graph, candidate: Candidate, inputs, elementwise: str = "auto") -> Emitted:
    """One graph lowered for `candidate` as its emulation lowers it: placement "auto" resolved
    as the model picks it; "layers" / "pipeline" placements and several requests as
    `dse.lower.lower_layers` schedules them, else `dse.lower.lower`. Raises `Infeasible`."""
    if candidate.mapping.placement == "auto":  # the placement the model picks (the analytical stage's too)
        from ..analytical.placed import resolve_auto

        candidate = Candidate(candidate.chip, resolve_auto(graph, candidate))
    m = candidate.mapping
    named = {n: _np(x) for n, x in zip(graph.inputs, inputs)}
    if m.placement in ("layers", "pipeline") or (m.requests or 1) > 1:  # `dse.plan.placement.schedule`
        requests = request_inputs(inputs, m.requests or 1)
        layered = lower_layers(graph, candidate, requests)
        first = layered.stages[0]
        return Emitted(layered.program, layered.image, candidate, [("", first)], named, [graph], layered, requests)
    lowered = lower(graph, candidate, inputs, elementwise=elementwise)
    return Emitted(lowered.program, lowered.image, candidate, [("", lowered)], named, [graph])


def emit_placed(stages: list[tuple[str, Graph, list]], candidate: Candidate) -> Emitted:
    """A staged workload's stages, ``(role, graph, inputs)`` each, placed in one program as
    ``candidate.mapping.placement`` says (`dse.lower.lower_placed`). Raises `Infeasible`."""
    if candidate.mapping.placement == "auto":
        from ..analytical.placed import resolve_auto_stages

        candidate = Candidate(candidate.chip, resolve_auto_stages([(r, g) for r, g, _ in stages], candidate))
    staged = lower_placed(stages, candidate)
    named = {f"{role}/{n}": _np(x) for role, g, xs in stages for n, x in zip(g.inputs, xs)}
    return Emitted(staged.program, staged.image, candidate,
                   [(f"{role}/", low) for (role, _, _), low in zip(stages, staged.stages)], named,
                   [g for _, g, _ in stages])


def emit_spans(graph: Graph, candidate: Candidate, inputs) -> Emitted:
    """Temporal spans over ``mapping.workers`` workers (`dse.lower.spans.lower_spans`).
    Raises `Infeasible` (a span that cannot be cut: `SpanError` as `Infeasible`)."""
    try:
        lowered = lower_spans(graph, candidate.chip, candidate.mapping, inputs, candidate.mapping.workers)
    except SpanError as exc:
        raise Infeasible(str(exc)) from None
    staged = lowered[0]
    return Emitted(staged.program, staged.image, candidate, [("", low) for low in staged.stages],
                   {n: _np(x) for n, x in zip(graph.inputs, inputs)}, [graph], spans=lowered)


__all__ = ["Emitted", "emit_graph", "emit_placed", "emit_spans", "weights_digest"]


def request_inputs(inputs, requests: int) -> list[list]:
    """The inputs of each of `requests` requests (``mapping.requests``): request k's are the
    workload's rotated by k along their last axis (tokens, features), so that no two
    requests compute alike and a request reading another's tensors shows in the numerics."""
    return [[torch.roll(torch.as_tensor(x), k, dims=-1) if k else x for x in inputs] for k in range(requests)]
