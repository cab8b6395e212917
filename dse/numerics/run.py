"""capture -> frontend steps -> lowering -> emulator -> comparison with PyTorch."""

from __future__ import annotations

import math
import time
from contextlib import ExitStack, closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from tqdm import tqdm

import emulator
from emulator.thread_limits import controller

from .. import allocator
from ..frontend import run_pipeline
from ..frontend.pipeline import run_reused
from ..frontend.steps import FLOAT_TOLERANCE, quantized_steps
from ..lower import Infeasible, Lowered
from ..mapping import Candidate, Mapping
from ..workload.graph import Graph
from ..workload.recipes import output_parts
from . import OutputCheck, Verdict, compare, unmodified_check, verdict
from .ahead import Ahead
from .boundary import BoundaryCheck
from .emitted import emit_graph, emit_placed, emit_spans, request_inputs


@dataclass
class EmulationReport:
    recipe: str
    chip: str
    mapping: dict
    feasible: bool
    reason: str = ""
    cycles: int = 0
    peak_sram_bytes: int = 0  # peak private SRAM of one worker (emulator counter, max over workers)
    private_sram_bytes: int = 0  # the chip's private SRAM per core
    counters: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    ops: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    emulator_seconds: float = 0.0  # the emulator's own run (emulator.run), without lowering and checks
    lower_seconds: float = 0.0  # lowering (plan, program, DRAM image), before the emulator's run
    rerun: tuple | None = field(default=None, repr=False)  # (program, DRAM image, mode): to time it again
    lowered: Lowered | None = None
    result: Any = None
    emitted: Any = None  # the program as emitted (`dse.numerics.emitted.Emitted`): outputs, inputs, digests
    # placement "layers": per tensor between ranges, (tensor, reading range, "shared" or "dram", why)
    handoffs: list = field(default_factory=list)
    # bytes of the DRAM image given back during the run (``keep_image=False``: `BoundaryCheck`);
    # then ``result.dram`` holds the graph's outputs, every other buffer possibly zeros
    released_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "chip": self.chip, "mapping": self.mapping, "feasible": self.feasible,
                "reason": self.reason, "cycles": self.cycles, "peak_sram_bytes": self.peak_sram_bytes,
                "private_sram_bytes": self.private_sram_bytes, "counters": self.counters,
                "numerics": self.verdict.to_dict() if self.verdict else None, "ops": self.ops,
                **({"handoffs": self.handoffs} if self.handoffs else {}),
                "seconds": round(self.seconds, 3), "allocator": allocator.in_use()}  # (what host times depend on)


def _counter_summary(result, workers: int) -> dict[str, Any]:
    cs = result.counters
    out: dict[str, Any] = {"cycles": int(result.cycles)}
    for name in ("instructions", "core_op_cycles", "core_op_elements", "dma_bytes_in", "dma_bytes_out",
                 "dma_bursts", "busy_cycles", "peak_allocated_bytes"):
        out[name] = [int(cs.value(name, core=c)) for c in range(workers)]
    out["matrix_busy_cycles"] = [int(cs.total("ball_busy_cycles", core=w, ball="matrix")) for w in range(workers)]
    out["shared_channel_conflicts"] = [int(cs.value("shared_channel_conflicts", core=c)) for c in range(workers)]
    # the tile of cores holding the most shared memory
    out["shared_bytes_used"] = int(max((r.value for r in cs.find("shared_bytes_used")), default=0))
    return out


def op_row(o, prefix: str = "", workers_used: int | None = None) -> dict:
    """A report's row of one lowered op (`OpLowering`); `prefix` names its stage or span."""
    return {"op": prefix + o.name, "kind": o.kind, "how": o.how, "tile": list(o.tile) if o.tile else None,
            "batch": o.batch, "banks": o.banks, "sram_bytes": o.sram_bytes,
            "workers_used": o.workers_used if workers_used is None else workers_used, "instructions": o.instructions,
            **({"note": o.note} if getattr(o, "note", "") else {})}


# The largest reference value computed before it is asked for (`Ahead`'s early items): one drawn
# early sits beside the DRAM buffers the boundary gives back before that value's check (an
# attention's 512 MB scores at seq 2048 beside their accumulator: the single layer's peak). The
# projections' and the MLP's (117 MB at seq 2048) are drawn early, the scores' when asked.
AHEAD_BYTES = 256 * 1024**2


class StreamedReference:
    """A graph's reference values as `compare` reads them, one op at a time in op order
    (`Graph.stream`): a real layer's reference trace would hold gigabytes at once. A name
    asked out of op order is served from a whole trace, made then.

    The next value is computed on a thread of its own (`Ahead`) as soon as the one before it
    is taken: during the emulator's run, while it computes the epoch that value is checked
    after (torch and the emulator's products let the GIL go). `close` stops that thread."""

    def __init__(self, graph: Graph, inputs, known: dict | None = None):
        """`known`: op outputs of this graph's trace on these inputs already computed (the
        frontend's check of it, `run_pipeline`'s kept values), taken rather than computed
        again; the dict itself is taken over, each value popped from it once streamed (a
        copy would leave the caller's holding every one until the comparison ends)."""
        self._graph, self._inputs = graph, inputs
        self._known = known if known is not None else {}
        self._values = Ahead(_one_thread(graph._execute(tuple(inputs), self._known, set(graph.outputs), True)),
                             "dse-reference", [graph.tensors[op.outputs[0]].nbytes <= AHEAD_BYTES for op in graph.ops])
        self._name: str | None = None
        self._value = None
        self._whole: dict | None = None

    def __getitem__(self, name: str):
        if self._whole is not None:
            return self._whole[name]
        if name == self._name:
            return self._value
        # the last value let go before the next is computed (a caller done with it holds none:
        # an attention's are GBs each); the trace keeps it while a later op still reads it
        self._name = self._value = None
        for self._name, self._value in self._values:
            self._known.pop(self._name, None)
            if self._name == name:
                return self._value
        self._name = self._value = None
        self._whole = self._graph.trace(*self._inputs, known=self._known)
        return self._whole[name]

    def close(self) -> None:
        """No more values drawn: the thread ends (the value it is computing finished first)."""
        self._values.close()


def _one_thread(values):
    """`values` drawn with torch's intra-op pool at one thread, as the emulator's run has it
    (`emulator.machine.Machine.run`), on the thread that draws them only (OpenMP's count is the
    calling thread's): the emulator's own thread and its products' keep the other core. The
    pools are looked up here, on the caller's thread, before the drawing thread starts
    (`emulator.thread_limits`: a lookup on that thread deadlocked against an import)."""
    pools = controller()

    def drawn():
        # torch's first call on a thread sets OpenMP's count there to the process's (when
        # torch.set_num_threads was ever called): made before the limit, not over it
        torch.get_num_threads()
        with pools.limit(limits=1, user_api="openmp"):
            yield from values

    return drawn()


def emulate_graph(graph: Graph, candidate: Candidate, inputs, expected=None, tolerance: float = FLOAT_TOLERANCE,
                  reference_kind: str = "quantized", mode: str = "overlapped", name: str = "",
                  reference: dict | None = None, elementwise: str = "auto",
                  progress: Callable[[str], None] | None = None, keep_image: bool = True,
                  known: dict | None = None, parts: list[str] | None = None) -> EmulationReport:
    """Lower `graph` for `candidate`, emulate it, and compare with the graph's reference and
    (when given) the float module's `expected` outputs. `elementwise` is the lowering's
    choice for quantize / requantize / dequantize (`dse.lower.lower`: auto, ball, core).
    A mapping with ``partition = "spans"`` runs as temporal spans (:func:`emulate_spans`).
    `progress` is told each phase as it starts: lower, emulate, reference, compare.
    ``keep_image=False``: the emulator runs on the lowered DRAM image itself rather than a
    copy (a real layer's image is gigabytes), so the report keeps nothing to run again
    (``rerun`` is None); each op is checked at the BARRIER that closes it and every buffer
    given back once its last reader has run (`dse.numerics.boundary`): ``lowered.image`` (the
    final image) then holds the graph's outputs, other buffers possibly zeros. `known`: values of the
    graph's own trace already computed (`StreamedReference`), when `reference` is not given.
    `parts`: the model's names of the graph's outputs (`Prepared.parts`), each checked on its own."""
    if candidate.mapping.partition == "spans":
        return emulate_spans(graph, candidate, inputs, expected, tolerance, mode, name, parts)
    progress = progress or (lambda phase: None)
    t0 = time.perf_counter()
    progress("lower")
    # What the frontend freed (gigabytes for a real layer), kept by jemalloc for the next
    # phases, is given back when the machine is short of memory (`dse.allocator`).
    allocator.give_back_freed()
    rep = EmulationReport(name or graph.name, candidate.chip.name, candidate.mapping.model_dump(mode="json"), True,
                          private_sram_bytes=candidate.chip.private_sram_bytes)
    try:
        emitted = emit_graph(graph, candidate, inputs, elementwise)
    except Infeasible as exc:
        rep.feasible, rep.reason = False, str(exc)
        rep.seconds = time.perf_counter() - t0
        return rep
    if emitted.candidate is not candidate:  # placement "auto", resolved as the model picks it
        candidate = emitted.candidate
        rep.mapping = candidate.mapping.model_dump(mode="json")
    layered, requests, lowered = emitted.layered, emitted.requests, emitted.lowereds[0][1]
    if layered is not None:
        rep.handoffs = [list(h) for h in layered.handoffs]
    progress("emulate")
    t_run = time.perf_counter()
    rep.lower_seconds = t_run - t0
    in_place = not keep_image and layered is None
    boundary = None
    with ExitStack() as streamed:  # a reference streamed here: its thread ends with the checks (or their failure)
        if in_place:
            # Nothing reads the image after the run but the graph's outputs: each op is checked at
            # the BARRIER that closes it and every buffer given back once done with (`BoundaryCheck`);
            # a kept image (a rerun, the evidence's buffers) is checked whole after the run.
            if reference is None:
                reference = streamed.enter_context(closing(StreamedReference(graph, inputs, known)))
            boundary = BoundaryCheck(graph, lowered, lowered.image, reference, candidate.chip)
        result = emulator.run(lowered.program, candidate.chip, lowered.image, mode=mode, in_place=in_place,
                              boundary=boundary, cuts=boundary.cuts if boundary is not None else None)
        rep.emulator_seconds = time.perf_counter() - t_run - (boundary.seconds if boundary is not None else 0.0)
        rep.rerun = None if in_place else (lowered.program, lowered.image, mode)
        if reference is None:  # the graph's own values, the same for every candidate: callers may pass them
            progress("reference")
            reference = streamed.enter_context(closing(StreamedReference(graph, inputs, known)))
        progress("compare")
        if boundary is not None:
            rep.verdict = verdict(graph, lowered, result.dram, boundary.finish(), reference, expected, tolerance,
                                  reference_kind, parts)
            rep.released_bytes = boundary.released
        else:
            rep.verdict = compare(graph, lowered, result.dram, reference, expected, tolerance, reference_kind, parts)
    if layered is not None and len(layered.stages) > 1:  # every request against its own reference
        verdicts = [rep.verdict] + [compare(graph, low, result.dram, graph.trace(*x), None, tolerance, reference_kind,
                                            parts)
                                    for low, x in zip(layered.stages[1:], requests[1:])]
        rep.verdict = combined(verdicts, [f"request {k}" for k in range(len(verdicts))])
    rep.cycles = int(result.cycles)
    rep.counters = _counter_summary(result, lowered.workers)
    rep.peak_sram_bytes = max(rep.counters["peak_allocated_bytes"], default=0)
    rep.ops = [op_row(o) for o in lowered.ops]
    rep.lowered, rep.result, rep.emitted = lowered, result, emitted
    rep.seconds = time.perf_counter() - t0
    return rep


def combined(verdicts: list[Verdict], names: list[str]) -> Verdict:
    """One verdict of several (stages, requests): it passes when every one does; its first
    differing op is named ``name:op``."""
    first = next((f"{n}:{v.first_differing_op}" for n, v in zip(names, verdicts) if v.first_differing_op), None)
    return Verdict(all(v.passed for v in verdicts), all(v.integer_bit_exact for v in verdicts),
                   all(v.outputs_bit_exact for v in verdicts), first, sum(v.integer_tensors for v in verdicts),
                   max(v.max_abs_error for v in verdicts), max(v.max_rel_error for v in verdicts),
                   max(v.tolerance for v in verdicts), all(v.outputs_within_tolerance for v in verdicts),
                   verdicts[0].reference, [op for v in verdicts for op in v.ops],
                   outputs=[replace(o, part=f"{n}:{o.part}") for n, v in zip(names, verdicts) for o in v.outputs])


@dataclass
class Prepared:
    """A recipe after its frontend steps, with the references its emulated outputs are
    checked against: shared by every candidate of a sweep."""

    recipe: str
    pipe: Any
    graph: Graph
    inputs: list
    expected: list | None
    tolerance: float
    reference_kind: str  # "quantized" (integer path bit for bit) or "float"
    failed: str = ""  # why the frontend failed ("" when it passed)
    parts: list[str] | None = None  # the model's names of the graph's outputs (`output_parts`)
    checked: str = "checked in full"  # how its frontend was checked: in full, or whose checked structure it reused


def prepare_recipe(recipe: str | Path, params: dict | None = None, steps=None, keep_bytes: int = 0,
                   inputs=None, remember: tuple[str, str] | None = None, reuse=None) -> Prepared:
    """The recipe through its frontend steps (`steps`: in place of its own, e.g. with the
    quantize step's granularity set), its inputs, and the PyTorch reference outputs.
    `keep_bytes`: up to this many bytes of the final graph's trace kept (``pipe.kept``).
    `inputs`: in place of the recipe's own example inputs (`run_pipeline`). `remember`: keep
    the checked structure (``pipe.structure``); `reuse`: another instance's checked structure
    to reuse (`run_reused`; run in full when this instance turns out not to be one of it)."""
    pipe, checked = None, "checked in full"
    if reuse is not None:
        pipe = run_reused(recipe, params or {}, reuse, inputs)
        if isinstance(pipe, str):  # not an instance of that structure after all
            pipe, checked = None, f"checked in full ({pipe})"
        else:
            checked = f"reused {reuse.source}'s checked structure"
    if pipe is None:
        pipe = run_pipeline(recipe, params or {}, steps=steps, keep_bytes=keep_bytes, inputs=inputs, remember=remember)
    if not pipe.passed:
        failed = next(s for s in pipe.stages if not s.passed)
        return Prepared(pipe.recipe, pipe, pipe.graph, [], None, FLOAT_TOLERANCE, "float",
                        f"frontend stage {failed.name} failed: {failed.error}", checked=checked)
    inputs, expected = pipe.inputs, pipe.expected  # the very inputs and outputs the steps were checked on
    graph = pipe.graph
    quantized = any(s.quantized for s in pipe.stages)
    tolerance = max(s.tolerance for s in pipe.stages)

    def matches(outs) -> bool:
        return len(outs) == len(graph.outputs) and all(tuple(e.shape) == graph.tensors[n].shape
                                                       for e, n in zip(outs, graph.outputs))

    if not matches(expected):
        # A step changed what the outputs are (last-token selection): the last float
        # graph with these outputs (itself checked against PyTorch to 1e-5) stands in, its
        # outputs as that stage's check computed them (run again only when not kept).
        expected = None
        for index, (stage, g) in reversed(list(enumerate(zip(pipe.stages, pipe.graphs)))):
            if not stage.quantized and len(g.outputs) == len(graph.outputs):
                outs = pipe.stage_outputs(index)
                outs = g.run(*inputs) if outs is None else outs
                if matches(outs):
                    expected = outs
                    break

    # The outputs' names from the recipe as given (a cached pipeline's path may be gone).
    parts = output_parts(recipe, len(graph.outputs))
    return Prepared(pipe.recipe, pipe, graph, list(inputs), expected, tolerance,
                    "quantized" if quantized else "float", parts=parts, checked=checked)


# The final graph's integer values (products, quantize ops) that `emulate_recipe` takes from
# the frontend's own check of it rather than computing its reference again, smallest first.
# At seq 2048 a Llama layer's all but the scores and the MLP's two widest products (seconds
# of the reference; its GEMMs are int8 now): those two (224 MB) would sit beside the DRAM
# image through the attention, the comparison's peak, to be read after it.
KEPT_REFERENCE_BYTES = 256 * 1024**2


def emulate_recipe(recipe: str | Path, chip, mapping: Mapping | None = None, params: dict | None = None,
                   check_unmodified: bool = False, mode: str = "overlapped", partition: str = "tiles") -> EmulationReport:
    """Run `recipe` (name or folder) through its frontend steps, lower it for `chip` with
    `mapping`, emulate it and check the numerics. With `check_unmodified`, the captured
    graph before any step is also lowered and checked (the verdict's ``unmodified``).

    The mapping's graph knobs are taken as a sweep's emulator stage takes them: its
    ``workload`` point (``{param: value, "recipe": name}``) over `recipe` and `params`, its
    ``quantization`` as the quantize step's weight granularity (`quantized_steps`); its
    placement, weights, fusion and layout knobs are `emulate_graph`'s."""
    mapping = mapping or Mapping()
    point = dict(mapping.workload or {})
    recipe, params = point.pop("recipe", recipe), {**(params or {}), **point}
    steps = quantized_steps(recipe, mapping.quantize_choice) if mapping.quantize_choice else None
    prep = prepare_recipe(recipe, params, steps=steps, keep_bytes=KEPT_REFERENCE_BYTES)
    if prep.failed:
        return EmulationReport(prep.recipe, chip.name, mapping.model_dump(mode="json"), False, reason=prep.failed)
    graph, inputs, expected = prep.graph, prep.inputs, prep.expected
    name, tolerance, reference_kind, parts = prep.recipe, prep.tolerance, prep.reference_kind, prep.parts
    unmodified, stepped = (prep.pipe.graphs[0] if check_unmodified else None), len(prep.pipe.graphs) > 1
    known = prep.pipe.kept
    # The stages' other graphs are not read again: let their weights go (a real layer's float
    # weights, once per stage that rewrote them, are gigabytes) before lowering and emulating.
    del prep
    cand = Candidate(chip, mapping)
    if partition == "spans" or mapping.partition == "spans":
        return emulate_spans(graph, cand, inputs, expected, tolerance, mode, name, parts)
    # A real model's lowering, emulation and checks take minutes: a bar on a terminal, nothing
    # otherwise (disable=None); one step a phase, of the stepped graph and the unmodified one.
    with tqdm(total=4 * (2 if check_unmodified else 1), desc=f"{name}: emulate", unit="phase", leave=False,
              disable=None) as bar:
        def phase(graph_name: str):
            def told(phase_name: str) -> None:
                bar.set_description(f"{name}: {phase_name}{graph_name}")
                bar.update()
            return told

        # Nothing here times the run again: the emulator takes the image rather than a copy.
        rep = emulate_graph(graph, cand, inputs, expected, tolerance, reference_kind, mode, name, progress=phase(""),
                            keep_image=False, known=known, parts=parts)
        del known
        if check_unmodified and rep.verdict is not None:
            base = emulate_graph(unmodified, cand, inputs, None if stepped else expected,
                                 FLOAT_TOLERANCE, "float", mode, name, progress=phase(" (unmodified graph)"),
                                 keep_image=False, parts=parts if len(unmodified.outputs) == len(parts or ()) else None)
            if base.verdict is not None:
                rep.verdict.unmodified = unmodified_check(rep.verdict, base.verdict)
        # Phases skipped (an infeasible candidate is not lowered further; the unmodified graph
        # is not run then): the answer is in, so the bar ends full.
        bar.update(bar.total - bar.n)
        bar.refresh()  # drawn full before it goes (an update within mininterval is not drawn)
    return rep


def emulate_spans(graph: Graph, candidate: Candidate, inputs, expected=None, tolerance: float = FLOAT_TOLERANCE,
                  mode: str = "overlapped", name: str = "", parts: list[str] | None = None) -> EmulationReport:
    """Temporal span partitioning (`dse.lower.spans.lower_spans`) over ``mapping.workers``
    workers: the assembled output against the unpartitioned reference, bit for bit, and
    every worker's tensors against the reference's rows (the first differing op named)."""
    from . import OpCheck, Verdict, _bits, _err

    t0 = time.perf_counter()
    chip, mapping = candidate.chip, candidate.mapping
    rep = EmulationReport(name or graph.name, chip.name, {**mapping.model_dump(mode="json", exclude_none=True),
                                                          "partition": "spans"},
                          True, private_sram_bytes=chip.private_sram_bytes)
    try:
        emitted = emit_spans(graph, candidate, inputs)
    except Infeasible as exc:
        rep.feasible, rep.reason = False, str(exc)
        return rep
    staged, spans, span_parts, final = emitted.spans
    t_run = time.perf_counter()
    rep.lower_seconds = t_run - t0
    result = emulator.run(staged.program, chip, staged.image, mode=mode)
    rep.emulator_seconds = time.perf_counter() - t_run
    rep.rerun = (staged.program, staged.image, mode)
    ref = graph.trace(*inputs)
    checks, first, int_ok, n_int = [], None, True, 0
    for low, (sg, need, axes) in zip(staged.stages, span_parts):
        for op in sg.ops:
            t = op.outputs[0]
            if t not in ref:
                continue
            want = ref[t].numpy().take(range(need[t].lo, need[t].hi), axis=axes[t])
            got = low.read(result.dram, t)
            same = got.shape == want.shape and np.array_equal(_bits(got), _bits(want))
            checks.append(OpCheck(f"{sg.name}:{op.name}", op.kind, sg.tensors[t].dtype, bool(same), _err(got, want)))
            if sg.tensors[t].dtype.startswith("int"):
                n_int += 1
                int_ok &= bool(same)
            if not same and first is None:
                first = f"{sg.name}:{op.name}"
    out = graph.outputs[0]
    got = final.read(result.dram)
    assembled = np.array_equal(_bits(got), _bits(ref[out].numpy()))
    max_abs = max_rel = 0.0
    within = True
    if expected is not None:
        w = expected[0].numpy() if hasattr(expected[0], "numpy") else np.asarray(expected[0])
        max_abs = _err(got, w)
        scale = float(np.abs(w).max()) if w.size else 0.0
        max_rel = max_abs / scale if scale else 0.0
        within = max_abs <= tolerance * max(scale, 1e-30)
    if expected is not None:
        check = OutputCheck(out, parts[0] if parts else out, tuple(got.shape), assembled, max_abs, max_rel, tolerance,
                            within, "float module")
    else:  # the assembled output against the unpartitioned reference, which it must equal
        want = ref[out].numpy()
        e = _err(got, want) if got.shape == want.shape else math.inf
        scale = float(np.abs(want).max()) if want.size else 0.0
        check = OutputCheck(out, parts[0] if parts else out, tuple(want.shape), assembled, e,
                            e / scale if scale else (0.0 if e == 0 else math.inf), tolerance, assembled,
                            "graph reference")
    rep.verdict = Verdict(int_ok and assembled and within, int_ok, assembled, first, n_int, max_abs, max_rel,
                          tolerance, within, "quantized", checks, outputs=[check])
    rep.cycles = int(result.cycles)
    rep.counters = _counter_summary(result, len(staged.program.cores))
    rep.peak_sram_bytes = max(rep.counters["peak_allocated_bytes"], default=0)
    rep.ops = [op_row(o, f"w{w}:", workers_used=1) for w, low in enumerate(staged.stages) for o in low.ops]
    rep.ops.insert(0, {"spans": [[s.lo, s.hi] for s in spans]})
    rep.result, rep.emitted = result, emitted
    rep.seconds = time.perf_counter() - t0
    return rep


@dataclass
class StageWork:
    """One stage of a placed workload (an LLM phase): its role, the graph after the recipe's
    steps, its inputs and the references its outputs are checked against."""

    role: str
    graph: Graph
    inputs: list
    expected: list | None = None
    tolerance: float = FLOAT_TOLERANCE
    reference_kind: str = "quantized"
    reference: dict | None = None
    parts: list[str] | None = None  # the model's names of the graph's outputs


def emulate_placed(stages: list[StageWork], candidate: Candidate, mode: str = "overlapped",
                   name: str = "") -> EmulationReport:
    """The stages placed as ``candidate.mapping.placement`` says (`dse.lower.lower_placed`),
    in one program, emulated once on the whole chip (each core with its group's hardware);
    every stage's tensors compared with its own reference. The verdict passes when every
    stage's does; its first differing op is named ``role:op``."""
    t0 = time.perf_counter()
    chip = candidate.chip
    rep = EmulationReport(name or " + ".join(s.role for s in stages), chip.name,
                          candidate.mapping.model_dump(mode="json", exclude_none=True), True,
                          private_sram_bytes=chip.private_sram_bytes)
    try:
        emitted = emit_placed([(s.role, s.graph, s.inputs) for s in stages], candidate)
    except Infeasible as exc:
        rep.feasible, rep.reason = False, str(exc)
        rep.seconds = time.perf_counter() - t0
        return rep
    if emitted.candidate is not candidate:  # placement "auto", resolved as the model picks it
        candidate = emitted.candidate
        rep.mapping = candidate.mapping.model_dump(mode="json", exclude_none=True)
    lowereds = [low for _, low in emitted.lowereds]
    t_run = time.perf_counter()
    rep.lower_seconds = t_run - t0
    result = emulator.run(emitted.program, chip, emitted.image, mode=mode)
    rep.emulator_seconds = time.perf_counter() - t_run
    rep.rerun = (emitted.program, emitted.image, mode)
    verdicts = []
    for s, low in zip(stages, lowereds):
        reference = s.reference if s.reference is not None else s.graph.trace(*s.inputs)
        verdicts.append(compare(s.graph, low, result.dram, reference, s.expected, s.tolerance, s.reference_kind,
                                s.parts))
    rep.verdict = combined(verdicts, [s.role for s in stages])
    rep.cycles = int(result.cycles)
    rep.counters = _counter_summary(result, len(emitted.program.cores))
    rep.peak_sram_bytes = max(rep.counters["peak_allocated_bytes"], default=0)
    rep.ops = [op_row(o, f"{s.role}:") for s, low in zip(stages, lowereds) for o in low.ops]
    rep.lowered, rep.result, rep.emitted = lowereds[0], result, emitted
    rep.seconds = time.perf_counter() - t0
    return rep
