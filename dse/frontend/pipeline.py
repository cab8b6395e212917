"""The frontend pipeline: capture a recipe whole, apply its steps in order, and after the
capture and after every step write a numbered text dump and check the graph against
PyTorch.

Stage 1 is the capture itself (`01-import.txt`): the unmodified graph, checked against
the module so that a failure later says whether the step or the capture is wrong (each
failing stage names the first failing stage in `blame`: "capture", or a step's name).
Stage k + 1 is the k-th step (`02-<step>.txt`, ...). A stage passes when, for every
output, max |graph - PyTorch| <= tolerance * max |PyTorch| (FLOAT_TOLERANCE = 1e-5 for
steps that keep float32, the step's declared tolerance for quantize), every tensor's value
has the shape and dtype its spec says, and the step's own check (quantize: bit-exact
against an integer implementation) passes. A step that cannot apply is a failed stage
with its reason, and the pipeline stops there. A reference that cannot tell a right graph
from a wrong one (an all-zero output, or one the inputs do not move) fails the capture
stage as a "vacuous comparison" unless the recipe declares it (`dse.frontend.vacuous`).

A result is cached (`dse.workload.cache`) under one key for the checked and the unchecked
run: an unchecked request takes either, a checked one only a checked entry (and its run
replaces an unchecked entry). This module imports torch only to run a pipeline: a cache
hit needs none (the example inputs and PyTorch outputs are pickled as numpy).
"""

from __future__ import annotations

import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from dse.frontend import repeated
from dse.frontend.rewrite import StepError
from dse.frontend.vacuous import DECLARATION, declared, redrawn_inputs, vacuous_outputs
from dse.workload import cache as graph_cache
from dse.workload.graph import Graph, same_computation
from dse.workload.vocabulary import ATTENTION_KINDS, CONV_KINDS, MATMUL_KINDS, SCAN_KINDS
from dse.workload.moe import follow_routing
from dse.workload.recipes import Recipe, instantiate, load_recipe, model_file, run_module

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from dse.frontend.steps import StepSpec


@dataclass
class Context:
    """What a step may read besides the graph: the module, its example inputs and the
    PyTorch outputs the current graph must reproduce (a step that changes the graph's
    outputs, such as last-token selection, maps them with `map_expected`)."""

    recipe: Recipe | None
    module: torch.nn.Module
    inputs: tuple
    expected: list[torch.Tensor]
    params: dict[str, Any]
    details: dict[str, Any] = field(default_factory=dict)
    traced: tuple[Graph, dict] | None = field(default=None, repr=False)  # the last graph traced, its kept values
    traced_graph: Graph | None = field(default=None, repr=False)  # that graph itself (not its copy)
    traced_problems: dict[str, str] = field(default_factory=dict, repr=False)  # its values unlike their spec
    # what a trace keeps past its values' last readers (`retained`, `calibration_reads`, `final_reads`)
    retain: Callable[[Graph], set[str]] | None = field(default=None, repr=False)

    @property
    def traced_problem(self) -> str | None:
        """The last trace's first value unlike its spec."""
        return next(iter(self.traced_problems.values()), None)

    def map_expected(self, transform: Callable[[list[torch.Tensor]], list[torch.Tensor]]) -> None:
        self.expected = list(transform(self.expected))

    def trace(self, graph: Graph, watch: Callable | None = None) -> dict[str, torch.Tensor]:
        """`graph.trace` on the example inputs, keeping only what is read after it (`retain`,
        by default `retained(graph)`; each other value goes after its last reader: a real
        layer's are gigabytes). A real model's float forward takes minutes, and the stage
        checks, a step's calibration and its own check each need one: a graph's trace takes
        every value that the last graph traced computed with the same op over inputs holding
        the same values (`Graph.trace`'s `previous`: the kept ones taken, the others computed
        again from them when read; after a rewritten op whose value came out bit for bit the
        same, its readers too), so no check is any less strict. The same graph again,
        unchanged, is not run at all: its kept values are all anyone reads afterwards.
        `watch(op, values)`: a check run op by op during the trace (`Graph.trace`); with one,
        the graph is always run. Each value's shape and dtype are checked against its spec as
        it is computed (`traced_problem`: the first that differs; a value not computed again,
        the previous trace's, was checked there). The last graph is kept as a copy of its
        ops, as traced: a step that edits a graph in place is compared with what was really
        run."""
        if watch is None and self.traced_graph is graph and same_computation(self.traced[0], graph):
            return dict(self.traced[1])
        from dse.workload.interpret import dtype_name

        problems: dict[str, str] = {}
        before = self.traced_problems

        def check(op, values):
            name = op.outputs[0]
            # a value not computed (the previous trace's, same op and spec) was checked there
            if not values.pending(name) or name in before:
                spec, value = graph.tensors[name], values[name]
                if tuple(value.shape) != spec.shape or dtype_name(value.dtype) != spec.dtype:
                    problems[name] = (f"tensor {spec.name}: spec {spec} but the op computes "
                                      f"{dtype_name(value.dtype)}{list(value.shape)}")
            if watch is not None:
                watch(op, values)

        previous, self.traced, self.traced_graph = self.traced, None, None  # each old value goes once passed
        values = graph.trace(*self.inputs, keep=(self.retain or retained)(graph), previous=previous, watch=check)
        del previous
        self.traced, self.traced_graph, self.traced_problems = (graph.copy(), values), graph, problems
        return dict(values)


# Ops whose value costs far more than a pass over memory: the products, attention, recurrences.
_COSTLY = (*MATMUL_KINDS, *CONV_KINDS, *ATTENTION_KINDS, *SCAN_KINDS)


def retained(graph: Graph) -> set[str]:
    """The values a stage's trace keeps past their last reader: the graph's outputs (the stage
    check, a chain's next input), each costly op's value and its activation operands (what
    the next stage's trace takes rather than computing again, what quantize calibrates on),
    and the integer values (the emulator's reference, `kept_values`). The rest (elementwise
    ops, norms, softmax, views, data movement: one pass each) is computed again from these
    when a later trace needs it."""
    keep = set(graph.outputs)
    for op in graph.ops:
        out = op.outputs[0]
        if op.kind in _COSTLY:
            keep.add(out)
            keep.update(name for name in op.inputs if name not in graph.weights)
        elif _integer(graph.tensors[out]):
            keep.add(out)
    return keep


def _integer(spec) -> bool:
    """An integer tensor (`kept_values`' choice, `is_integer`, by its spec)."""
    return not spec.dtype.startswith(("float", "bfloat", "complex", "bool"))


def calibration_reads(graph: Graph) -> set[str]:
    """What a trace keeps when no stage check follows to take its values (a reused instance,
    `run_reused`): the outputs (its float check), each costly op's activation operands and a
    recurrence's value (what quantize calibrates on)."""
    keep = set(graph.outputs)
    for op in graph.ops:
        if op.kind in _COSTLY:
            keep.update(name for name in op.inputs if name not in graph.weights)
        if op.kind in SCAN_KINDS:
            keep.add(op.outputs[0])
    return keep


def final_reads(graph: Graph, budget: int) -> set[str]:
    """What the last stage's trace keeps (no later trace takes its values): the outputs, and
    the integer values `kept_values` may keep within `budget` bytes (none larger can be)."""
    keep = set(graph.outputs)
    for op in graph.ops:
        spec = graph.tensors[op.outputs[0]]
        if 0 < spec.nbytes <= budget and _integer(spec):
            keep.add(op.outputs[0])
    return keep


@dataclass
class OutputCheck:
    name: str
    shape: list[int]
    max_abs_error: float
    max_abs_reference: float
    relative_error: float
    passed: bool


@dataclass
class StageResult:
    index: int
    name: str  # "import" for the capture, else the step's name
    options: dict[str, Any]
    dump: str  # the dump's file name, e.g. "01-import.txt"
    ops: int
    macs: int
    weight_bytes: int
    quantized: bool
    tolerance: float
    outputs: list[OutputCheck]
    max_abs_error: float
    max_rel_error: float
    passed: bool
    blame: str | None  # the first failing stage when this one fails ("capture" or a step)
    details: dict[str, Any]
    error: str | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Reference:
    """The example inputs and PyTorch's outputs a pipeline was checked on (torch tensors),
    and the outputs each stage's check computed where they are not the module's (after a
    step that changes what the outputs are: last-token selection), by stage index: a float
    stand-in reference for the stages after it, not computed again. Pickled as numpy arrays
    with their dtype names, and made tensors again on first use, so a cached result loads
    without torch."""

    def __init__(self, inputs=(), expected=(), stage_outputs: dict[int, list] | None = None):
        self._tensors: tuple[tuple, list, dict] | None = (tuple(inputs), list(expected), dict(stage_outputs or {}))
        self._frozen: tuple | None = None

    @property
    def inputs(self) -> tuple:
        return self._thawed()[0]

    @property
    def expected(self) -> list:
        return self._thawed()[1]

    @property
    def stage_outputs(self) -> dict[int, list]:
        return self._thawed()[2]

    def _thawed(self) -> tuple[tuple, list, dict]:
        if self._tensors is None:
            from dse.workload.interpret import weight_tensor

            def thaw(part):
                return [weight_tensor(array, dtype) for dtype, array in part]

            inputs, expected, by_stage = self._frozen
            self._tensors = (tuple(thaw(inputs)), thaw(expected), {i: thaw(v) for i, v in by_stage.items()})
            self._frozen = None
        return self._tensors

    def __getstate__(self) -> dict:
        if self._frozen is not None:
            return {"frozen": self._frozen}
        from dse.workload.interpret import dtype_name, weight_array

        def freeze(part):
            return [(dtype_name(t.dtype), weight_array(t)) for t in part]

        inputs, expected, by_stage = self._tensors
        return {"frozen": (freeze(inputs), freeze(expected), {i: freeze(v) for i, v in by_stage.items()})}

    def __setstate__(self, state: dict) -> None:
        self._tensors, self._frozen = None, state["frozen"]


@dataclass
class PipelineResult:
    recipe: str
    path: str
    params: dict[str, Any]
    stages: list[StageResult]
    graphs: list[Graph]  # the graph after each stage that ran (same order as stages)
    out_dir: str | None
    # The example inputs and PyTorch's outputs the stages were checked on: one call of the
    # recipe's inputs() and load(), so an unseeded recipe still checks against itself.
    reference: Reference = field(default_factory=Reference)
    checked: bool = True  # False: made with check=False (the stages' errors are NaN)
    # Values of the last graph's trace on the example inputs, as its stage check computed
    # them (`run_pipeline`'s keep_bytes): never cached, None on a cache hit.
    kept: dict | None = field(default=None, repr=False)
    # The checked structure a repeated instance reuses (`dse.frontend.repeated`): made when
    # asked (`remember`) of a run that passed; never cached.
    structure: Any = field(default=None, repr=False)
    # Set on a run that reused another instance's checked structure: whose ("llama_layers[layer=0]").
    reused: str = ""

    @property
    def inputs(self) -> tuple:
        return self.reference.inputs

    @property
    def expected(self) -> list:
        return self.reference.expected

    def stage_outputs(self, index: int) -> list | None:
        """The outputs of stage `index`'s graph on the example inputs, as its check computed
        them (`Graph.run`'s values), kept for a stage whose outputs are not the module's;
        None otherwise (or unchecked)."""
        return self.reference.stage_outputs.get(index)

    @property
    def passed(self) -> bool:
        return bool(self.stages) and all(stage.passed for stage in self.stages)

    @property
    def graph(self) -> Graph:
        """The graph after the last stage that ran."""
        return self.graphs[-1]

    def to_dict(self) -> dict[str, Any]:
        return {"recipe": self.recipe, "path": self.path, "params": self.params, "passed": self.passed,
                "out_dir": self.out_dir, "stages": [stage.to_dict() for stage in self.stages]}

    def table(self) -> pd.DataFrame:
        import pandas as pd

        rows = [{"stage": f"{s.index:02d}-{s.name}", "ops": s.ops, "macs": s.macs, "quantized": s.quantized,
                 "max_abs_error": s.max_abs_error, "max_rel_error": s.max_rel_error, "tolerance": s.tolerance,
                 "passed": s.passed} for s in self.stages]
        return pd.DataFrame(rows)


def check_graph(graph: Graph, ctx: Context, tolerance: float) -> tuple[list[OutputCheck], list[str]]:
    """Run the graph on the example inputs and compare every output with PyTorch (and each
    value's shape and dtype with its spec, as `Context.trace` computes it)."""
    values = ctx.trace(graph)
    problems = [ctx.traced_problem] if ctx.traced_problem else []
    if len(graph.outputs) != len(ctx.expected):
        problems.append(f"{len(graph.outputs)} outputs, PyTorch gives {len(ctx.expected)}")
    checks = []
    for name, want in zip(graph.outputs, ctx.expected):
        got = values[name]
        if got.shape != want.shape:
            problems.append(f"output {name}: shape {list(got.shape)}, PyTorch {list(want.shape)}")
            checks.append(OutputCheck(name, list(got.shape), float("inf"), 0.0, float("inf"), False))
            continue
        error = (got.double() - want.double()).abs().max().item() if want.numel() else 0.0
        scale = want.double().abs().max().item() if want.numel() else 0.0
        relative = error / scale if scale > 0 else (0.0 if error == 0 else float("inf"))
        passed = error <= tolerance * max(scale, 1e-30)
        checks.append(OutputCheck(name, list(got.shape), error, scale, relative, passed))
        if not passed:
            problems.append(f"output {name}: max abs error {error:.3e} > {tolerance:g} x max |PyTorch| {scale:.3e}")
    return checks, problems


def _stage(index: int, name: str, options: dict, graph: Graph, ctx: Context, tolerance: float, quantized: bool,
           started: float, verify: Callable | None = None, check: bool = True) -> StageResult:
    # the step's own check first: its trace (the integer check runs during it) is the one the
    # stage check then takes, unchanged
    extra = verify(graph, ctx) if verify is not None and check else None
    checks, problems = check_graph(graph, ctx, tolerance) if check else ([], [])
    details = dict(ctx.details)
    if extra is not None:
        details.update({k: v for k, v in extra.items() if k != "passed"})
        if not extra["passed"]:
            problems.append(f"{name}: its own check failed: {extra}")
    errors = [c.max_abs_error for c in checks] or [0.0 if check else float("nan")]
    relative = [c.relative_error for c in checks] or [0.0 if check else float("nan")]
    return StageResult(index, name, options, f"{index:02d}-{name}.txt", len(graph.ops), graph.totals().macs,
                       graph.totals().weight_bytes, quantized, tolerance, checks, max(errors), max(relative),
                       not problems, None, details, "; ".join(problems) or None, time.perf_counter() - started)


def _failed(index: int, step: StepSpec, error: BaseException, started: float) -> StageResult:
    if isinstance(error, StepError):
        message = f"{step.name} cannot apply: {error}"
    else:  # a bug in a step: keep where it happened
        frame = traceback.extract_tb(error.__traceback__)[-1]
        message = f"{step.name} raised {type(error).__name__}: {error} ({Path(frame.filename).name}:{frame.lineno})"
    return StageResult(index, step.name, step.options, f"{index:02d}-{step.name}.txt", 0, 0, 0,
                       step.definition.quantized, step.tolerance, [], float("nan"), float("nan"), False, None, {},
                       message, time.perf_counter() - started)


def run_pipeline(recipe: str | Path | Recipe, params: dict[str, Any] | None = None,
                 steps: list[StepSpec] | None = None, out_dir: str | Path | None = None,
                 check: bool = True, keep_bytes: int = 0, inputs=None,
                 remember: tuple[str, str] | None = None) -> PipelineResult:
    """Capture `recipe` and apply its steps (`steps`, or the recipe's own list), checking each
    stage against PyTorch; with `out_dir`, write the numbered dumps there. ``check=False``
    skips the comparisons (errors NaN): for callers that need the graph's structure only
    (the analytical model, the mapper), the same graph, made faster. `keep_bytes`: up to
    this many bytes of the last graph's integer values, as its check traced them, kept in
    the result's ``kept`` (`kept_values`) for a caller that needs that trace again (the
    emulator's reference); none on a cache hit. `inputs`: the example inputs in place of the
    recipe's ``inputs()`` (a chain stage's, the previous stage's float outputs fed in: the
    steps calibrated and checked on the values the model really sees there); not cached.
    `remember`: (structure key, the instance's name): a run that passes keeps its checked
    structure in ``structure``, for `run_reused` (`dse.frontend.repeated`); not cached."""
    path = recipe.path if isinstance(recipe, Recipe) else model_file(recipe)
    params = dict(params or {})
    out = Path(out_dir) if out_dir is not None else None
    # The recipe's own steps are named by steps.toml and the step code, which the key covers.
    key = graph_cache.pipeline_key(path.parent, params, None if steps is None else
                                   [(s.name, s.options) for s in steps])
    cached = graph_cache.load(key) if inputs is None and remember is None else None
    if isinstance(cached, PipelineResult) and (cached.checked or not check):
        return _served(cached, out)
    from dse.frontend.steps import load_steps

    recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    steps = load_steps(recipe.path.parent) if steps is None else list(steps)
    result = _run(recipe, params, steps, out, check, keep_bytes, inputs, remember if check else None)
    if inputs is None and all(stage.error is None for stage in result.stages):  # a crashed step may be the machine's: run it again
        graph_cache.store(key, replace(result, out_dir=None, kept=None, structure=None))
    return result


def _served(result: PipelineResult, out: Path | None) -> PipelineResult:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for stage, stage_graph in zip(result.stages, result.graphs):
            (out / stage.dump).write_text(stage_graph.dump())
    return replace(result, out_dir=str(out) if out else None)


def _run(recipe: Recipe, params: dict[str, Any], steps: list[StepSpec], out: Path | None,
         check: bool, keep_bytes: int = 0, given=None, remember: tuple[str, str] | None = None) -> PipelineResult:
    from tqdm.auto import tqdm  # a widget in Jupyter (ipywidgets), text on a terminal

    from dse.frontend.steps import FLOAT_TOLERANCE
    from dse.workload.capture import capture, flat_outputs

    # A real model's capture and checks take minutes: a bar on a terminal, nothing otherwise
    # (disable=None: quiet when stderr is not a terminal); it goes once the pipeline ends.
    bar = tqdm(total=len(steps) + 2, desc=f"{recipe.name}: run the module", unit="stage", leave=False,
               disable=None)
    try:
        module, inputs = instantiate(recipe, **params)
        inputs = inputs if given is None else tuple(given)
        expected = flat_outputs(run_module(recipe, module, inputs))
        ctx = Context(recipe, module, inputs, expected, params)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
        bar.update()
        bar.set_description(f"{recipe.name}: capture" + (" + check" if check else ""))
        started = time.perf_counter()
        graph = capture(module, *inputs, name=recipe.name, source_path=recipe.path)
        structure = repeated.remember(*remember, graph, module, steps) if remember else None
        # the module on redrawn inputs before any trace: its activations (a real layer's are a
        # gigabyte) on top of the module and the capture alone, not of every stage's graph
        vacuous = _check_vacuous(recipe, module, inputs, expected, graph.outputs) if check else []
        stages = [_stage(1, "import", {}, graph, ctx, FLOAT_TOLERANCE, False, started, check=check)]
        graphs = [graph]
        stage_outputs: dict[int, list] = {}
        bar.update()
        for index, step in enumerate(steps, start=2):
            bar.set_description(f"{recipe.name}: {step.name}" + (" + check" if check else ""))
            ctx.details = {}
            started = time.perf_counter()
            try:
                graph = step.definition.run(graph, ctx, **step.options)
                graph = follow_routing(graph, ctx.inputs)  # its own router's token counts per expert
            except Exception as error:  # recorded as the stage's failure; the pipeline stops here
                stages.append(_failed(index, step, error, started))
                break
            if index == len(steps) + 1:  # the last stage: no later trace takes its values
                ctx.retain = partial(final_reads, budget=keep_bytes)
            stages.append(_stage(index, step.name, step.options, graph, ctx, step.tolerance,
                                 step.definition.quantized, started, step.definition.verify, check=check))
            graphs.append(graph)
            if check and not step.definition.quantized and not _outputs_like(graph, expected):
                # the check's trace is this graph's (ctx.traced): its outputs are Graph.run's
                stage_outputs[len(stages) - 1] = [ctx.traced[1][name].clone() for name in graph.outputs]
            bar.update()
        kept = None
        if keep_bytes > 0 and ctx.traced_graph is graph and stages[-1].passed:
            kept = kept_values(graph, ctx.traced[1], keep_bytes)
        # The last trace's other values go before the module's second forward: at seq 2048 a
        # Llama layer's are gigabytes, and that forward was the run's peak on top of them.
        ctx.traced = ctx.traced_graph = None
        if check:
            _mark_vacuous(stages[0], recipe, vacuous)
        bar.refresh()  # the last stage's update drawn before the bar goes (within mininterval it is not)
    finally:
        bar.close()
    del ctx
    first_failure = next((s for s in stages if not s.passed), None)
    for stage in stages:
        if not stage.passed:
            stage.blame = "capture" if first_failure.name == "import" else first_failure.name
    if out is not None:
        for stage, stage_graph in zip(stages, graphs):
            (out / stage.dump).write_text(stage_graph.dump())
    return PipelineResult(recipe.name, str(recipe.path), params, stages, graphs, str(out) if out else None,
                          Reference(inputs, expected, stage_outputs), check, kept,
                          structure if first_failure is None else None)


def run_reused(recipe: str | Path | Recipe, params: dict[str, Any], structure: repeated.Structure,
               inputs=None) -> PipelineResult | str:
    """Another instance of a checked `structure` (a later layer of a whole model): its
    module's forward on `inputs` (or its own example inputs), its tensors substituted into
    the structure's captured graph and the structure's steps run on it (its own calibration
    and quantization) without their stage checks, the vacuous check or quantize's integer
    check: `dse.frontend.repeated` says why that is enough. The last float graph (the one
    quantize calibrates on) is checked against the forward within FLOAT_TOLERANCE, from the
    trace calibration made. The reason (a string) when the instance is not the structure's
    (another tensor shape, a buffer that differs): the caller runs it in full."""
    from dse.frontend.steps import FLOAT_TOLERANCE
    from dse.workload.capture import flat_outputs

    recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    module, own = instantiate(recipe, **params)
    graph, why = repeated.substituted(structure, module)
    if graph is None:
        return why
    inputs = own if inputs is None else tuple(inputs)
    expected = flat_outputs(run_module(recipe, module, inputs))
    ctx = Context(recipe, module, inputs, expected, params, retain=calibration_reads)
    note = f"reused {structure.source}'s checked structure"
    started = time.perf_counter()
    stages = [_stage(1, "import", {}, graph, ctx, FLOAT_TOLERANCE, False, started, check=False)]
    stages[0].details["reused"] = note
    graphs, float_graph, float_index = [graph], graph, 0
    for index, step in enumerate(structure.steps, start=2):
        ctx.details = {}
        started = time.perf_counter()
        try:
            graph = step.definition.run(graph, ctx, **step.options)
            graph = follow_routing(graph, ctx.inputs)
        except Exception as error:  # as in `_run`: the stage's failure, the run stops there
            stages.append(_failed(index, step, error, started))
            break
        stages.append(_stage(index, step.name, step.options, graph, ctx, step.tolerance, step.definition.quantized,
                             started, check=False))
        stages[-1].details["reused"] = note
        graphs.append(graph)
        if not step.definition.quantized:
            float_graph, float_index = graph, len(stages) - 1
    else:
        # The float graph against the module's forward: its values are calibration's trace
        # when quantize calibrated on it (ctx.trace takes them), else traced now.
        checked = _stage(float_index + 1, stages[float_index].name, stages[float_index].options, float_graph, ctx,
                         FLOAT_TOLERANCE, False, time.perf_counter())
        float_stage = stages[float_index]
        float_stage.outputs, float_stage.passed, float_stage.error = checked.outputs, checked.passed, checked.error
        float_stage.max_abs_error, float_stage.max_rel_error = checked.max_abs_error, checked.max_rel_error
        float_stage.details["float_check"] = "against the module's forward (calibration's trace)"
    ctx.traced = ctx.traced_graph = None
    del ctx
    first_failure = next((s for s in stages if not s.passed), None)
    for stage in stages:
        if not stage.passed:
            stage.blame = "capture" if first_failure.name == "import" else first_failure.name
    return PipelineResult(recipe.name, str(recipe.path), params, stages, graphs, None,
                          Reference(inputs, expected, {}), True, None, None, structure.source)


def _check_vacuous(recipe: Recipe, module, inputs: tuple, expected: list, names: list[str]) -> list[str]:
    """Why the PyTorch reference cannot tell a right graph from a wrong one, if it cannot
    (`dse.frontend.vacuous`: an all-zero output, or one the redrawn inputs do not move).
    The module's second forward may touch its buffers, which the captured graph reads in
    place: each is put back as it was, so the stages see what they would without it."""
    import torch

    from dse.frontend.steps import FLOAT_TOLERANCE
    from dse.workload.capture import flat_outputs

    redrawn_args, changed = redrawn_inputs(inputs)
    redrawn = None
    if changed:
        buffers = {name: buffer.detach().clone() for name, buffer in module.named_buffers()}
        try:
            with torch.no_grad():
                redrawn = flat_outputs(module(*redrawn_args))
        except Exception:  # noqa: BLE001 - inputs the model refuses: only the all-zero test applies
            redrawn = None
        finally:
            with torch.no_grad():
                for name, buffer in module.named_buffers():
                    if name in buffers and buffer.shape == buffers[name].shape:
                        buffer.copy_(buffers[name])
            del buffers
    return vacuous_outputs(names, expected, redrawn, FLOAT_TOLERANCE)


def _mark_vacuous(stage: StageResult, recipe: Recipe, found: list[str]) -> None:
    """The capture stage fails with "vacuous comparison" for what `_check_vacuous` found,
    unless the recipe declares it."""
    if not found:
        return
    reason = declared(recipe.module)
    stage.details["vacuous"] = found
    if reason is not None:
        stage.details["vacuous_declared"] = reason
        return
    message = (f"vacuous comparison: {'; '.join(found)} (the check compares nothing; re-draw the weights that make "
               f"it so, or declare {DECLARATION} = \"why\" in model.py)")
    stage.passed = False
    stage.error = f"{stage.error}; {message}" if stage.error else message


def kept_values(graph: Graph, values: dict, budget: int) -> dict:
    """The op outputs of integer dtype among `values` (the integer path: the products, most
    of a quantized graph's compute, and the quantize ops, four passes over a float tensor
    for a quarter of its bytes), the largest left out until the rest fit `budget` bytes.
    The float values are one cheap pass each, and a real layer's are gigabytes."""
    from dse.workload.interpret import is_integer

    def storage(name: str) -> tuple[int, int]:  # a view keeps its whole base alive
        s = values[name].untyped_storage()
        return s.data_ptr(), s.nbytes()

    outs = [op.outputs[0] for op in graph.ops if op.outputs[0] in values]
    chosen = sorted((name for name in outs if is_integer(values[name])), key=lambda name: storage(name)[1])
    kept, held = {}, {}
    for name in chosen:
        pointer, size = storage(name)
        if pointer not in held and sum(held.values()) + size > budget:
            break
        kept[name] = values[name]
        held[pointer] = size
    return kept


def _outputs_like(graph: Graph, outputs: list) -> bool:
    """Whether `graph`'s outputs have the shapes of `outputs` (the module's), one for one."""
    return len(graph.outputs) == len(outputs) and all(tuple(o.shape) == graph.tensors[n].shape
                                                      for o, n in zip(outputs, graph.outputs))
