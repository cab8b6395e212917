"""Chained recipe graphs: stages where one graph's outputs are the next graph's inputs
(llama prefill's KV cache feeding a decode step). Declared as data, a `chain.toml` in a
recipe folder:

    [[stage]]
    recipe = "llama_prefill"
    params = { seq = 4, ... }

    [[stage]]
    recipe = "llama_decode"
    params = { past = 4, ... }
    feeds = { past_k = "k_cache", past_v = "v_cache" }  # this graph's input <- the previous stage's output

An input is named as its model's forward names it, an output as its model's ``OUTPUTS``.
Three runs of the chain, each stage fed by its predecessor's outputs of the same run:
- the float reference: the PyTorch modules (`float_chain`);
- the frontend's: each stage's final graph after its recipe's steps (`graph_chain`),
  checked end to end: the chain's final outputs against the float reference's, within
  the sum of the stages' tolerances (each stage's rounding feeds the next);
- the emulator's (`emulate_chain`): each stage lowered and emulated on the previous stage's
  *emulated* outputs, checked against its own graph reference on those very inputs (bit
  for bit on the integer path) and, at the end, against the float reference of the chain.
"""

from __future__ import annotations

import inspect
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import InputError
from ..frontend.repeated import structure_key
from ..mapping import Candidate, Mapping
from ..workload.recipes import CHAIN_FILE, load_recipe, model_file
from .run import KEPT_REFERENCE_BYTES, emulate_graph, prepare_recipe


@dataclass(frozen=True)
class ChainStage:
    recipe: str
    params: dict
    feeds: dict[str, str] = field(default_factory=dict)  # input name -> previous stage's output name
    repetition: str = ""  # a repeated stage's index ("layer=3"), "" for a stage of its own

    @property
    def label(self) -> str:
        return f"{self.recipe}[{self.repetition}]" if self.repetition else self.recipe


def _forward_inputs(recipe: str) -> list[str]:
    """The names of the recipe's graph inputs, as its module's forward names them."""
    module = load_recipe(recipe).module
    cls = inspect.signature(module.load).return_annotation
    forward = getattr(cls, "forward", None) if isinstance(cls, type) else None
    if forward is None:  # not annotated: the module itself, loaded with its defaults
        forward = type(module.load()).forward
    return [p for p in inspect.signature(forward).parameters if p != "self"]


def _outputs(recipe: str) -> list[str] | None:
    names = getattr(load_recipe(recipe).module, "OUTPUTS", None)
    return list(names) if isinstance(names, (tuple, list)) else None


def _load_params(recipe: str) -> list[str]:
    return list(inspect.signature(load_recipe(recipe).module.load).parameters)


def load_chain(path: str | Path) -> list[ChainStage]:
    """A chain file (or a recipe folder holding one), checked: each stage's recipe exists,
    each feed names an input of its graph and an output of the previous stage's model. A
    stage with ``repeat = N`` is N stages (a whole model's layers), the k-th with its
    ``index`` param (default "layer") its own plus k, each fed by the one before it."""
    path = Path(path)
    if path.is_dir():
        path = path / CHAIN_FILE
    if not path.is_file():
        raise InputError(path, "chain", str(path), f"a {CHAIN_FILE} file, or a recipe folder holding one")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise InputError(path, "chain", str(error), "valid TOML") from None
    stages = data.get("stage")
    repeated = isinstance(stages, list) and any(isinstance(s, dict) and "repeat" in s for s in stages)
    if not isinstance(stages, list) or not stages or (len(stages) < 2 and not repeated):
        raise InputError(path, "stage", stages, "two or more [[stage]] tables (or one with repeat = N)")
    out: list[ChainStage] = []
    for i, s in enumerate(stages):
        where = f"stage[{i}]"
        if (not isinstance(s, dict) or set(s) - {"recipe", "params", "feeds", "repeat", "index"}
                or not isinstance(s.get("recipe"), str)):
            raise InputError(path, where, s, "a table with recipe (a name), params and feeds (from the second on), "
                                             "repeat and index (optional)")
        model_file(s["recipe"])  # an unknown recipe: its own one-line error
        params, feeds = s.get("params", {}), s.get("feeds", {})
        if not isinstance(params, dict) or not isinstance(feeds, dict):
            raise InputError(path, f"{where}.params/feeds", (params, feeds), "tables")
        repeat, index = s.get("repeat", 1), s.get("index", "layer")
        repeats = "repeat" in s  # its feeds name its own outputs too (each repetition feeds the next)
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise InputError(path, f"{where}.repeat", repeat, "a whole number >= 1")
        if repeats and index not in _load_params(s["recipe"]):
            raise InputError(path, f"{where}.index", index,
                             f"a parameter of {s['recipe']}'s load(): {', '.join(_load_params(s['recipe']))}")
        if i == 0 and feeds and not repeats:
            raise InputError(path, f"{where}.feeds", feeds, "none: the first stage has no previous stage")
        inputs = _forward_inputs(s["recipe"])
        sources = ([out[-1].recipe] if i > 0 else []) + ([s["recipe"]] if repeats else [])
        if sources and not feeds:
            raise InputError(path, f"{where}.feeds", feeds, "at least one input fed by the previous stage")
        for name, source in feeds.items():
            if name not in inputs:
                raise InputError(path, f"{where}.feeds", name, f"an input of {s['recipe']}: {', '.join(inputs)}")
            for recipe in sources:
                previous = _outputs(recipe)
                if previous is None or source not in previous:
                    raise InputError(path, f"{where}.feeds.{name}", source,
                                     f"an output of {recipe} (its OUTPUTS): {', '.join(previous or ['(none named)'])}")
        if not repeats:
            out.append(ChainStage(s["recipe"], dict(params), dict(feeds)))
            continue
        first = params.get(index, 0)
        for k in range(repeat):  # only params: each repetition's weights are drawn when its turn comes
            out.append(ChainStage(s["recipe"], {**params, index: first + k}, dict(feeds) if i or k else {},
                                  f"{index}={first + k}"))
    return out


def with_params(stages: list[ChainStage], params: dict, source: str = "--param") -> list[ChainStage]:
    """The stages with `params` set in every stage whose recipe takes them (a smaller prompt
    for the whole model: ``seq=256``); a param no stage takes is an InputError."""
    taken = {}
    for recipe in dict.fromkeys(s.recipe for s in stages):
        module = load_recipe(recipe).module
        taken[recipe] = {n for f in (module.load, module.inputs) for n in inspect.signature(f).parameters}
    for key, value in params.items():
        if not any(key in names for names in taken.values()):
            raise InputError(source, key, value, "a parameter of at least one stage's recipe: "
                                                 + ", ".join(sorted(set().union(*taken.values()))))
        if any(key == s.repetition.partition("=")[0] for s in stages):
            raise InputError(source, key, value, "not a repeated stage's index (the chain sets it per repetition)")
    return [ChainStage(s.recipe, {**s.params, **{k: v for k, v in params.items() if k in taken[s.recipe]}},
                       s.feeds, s.repetition) for s in stages]


def _flat(outputs) -> list[torch.Tensor]:
    return [outputs] if isinstance(outputs, torch.Tensor) else [o for o in outputs if o is not None]


def _fed(stage: ChainStage, own: list, previous: dict[str, Any] | None) -> list:
    """The stage's inputs: its recipe's own, those it is fed replaced by the previous stage's outputs."""
    if previous is None:
        return list(own)
    names = _forward_inputs(stage.recipe)
    out = list(own)
    for name, source in stage.feeds.items():
        i = names.index(name)
        value = previous[source]
        value = torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value
        if tuple(value.shape) != tuple(own[i].shape):
            raise InputError(stage.recipe, f"feeds.{name}", tuple(value.shape),
                             f"the input's shape {tuple(own[i].shape)} (set the stages' params to agree)")
        out[i] = value.to(own[i].dtype)
    return out


def _named(stage: ChainStage, values: list) -> dict[str, Any]:
    names = _outputs(stage.recipe) or [f"output{i}" for i in range(len(values))]
    return dict(zip(names, values))


def float_chain(stages: list[ChainStage]) -> list[dict[str, torch.Tensor]]:
    """Each stage's float PyTorch outputs by name, the modules fed one by the other."""
    out: list[dict[str, torch.Tensor]] = []
    for stage in stages:
        module = load_recipe(stage.recipe).module
        inputs = _fed(stage, list(module.inputs(**stage.params)), out[-1] if out else None)
        with torch.no_grad():
            out.append(_named(stage, _flat(module.load(**stage.params)(*inputs))))
    return out


@dataclass
class PartCheck:
    """One output of the chain's last stage against the float reference of the chain."""

    part: str
    shape: tuple[int, ...]
    max_abs_error: float
    max_rel_error: float  # / max |reference|
    tolerance: float
    within_tolerance: bool

    def line(self) -> str:
        return (f"{self.part} {self.shape}: vs the float chain max abs {self.max_abs_error:.3g}, rel "
                f"{self.max_rel_error:.3g}, tolerance {self.tolerance:g}: "
                f"{'within' if self.within_tolerance else 'BEYOND'}")


def _checks(got: dict[str, Any], want: dict[str, torch.Tensor], tolerance: float) -> list[PartCheck]:
    out = []
    for part, w in want.items():
        if part not in got:  # an output the steps dropped (prefill's logits but the last token)
            continue
        g = np.asarray(got[part].numpy() if isinstance(got[part], torch.Tensor) else got[part], dtype=np.float64)
        w64 = w.numpy().astype(np.float64)
        if g.shape != w64.shape:
            out.append(PartCheck(part, tuple(w64.shape), math.inf, math.inf, tolerance, False))
            continue
        err = float(np.max(np.abs(g - w64))) if g.size else 0.0
        scale = float(np.max(np.abs(w64))) if w64.size else 0.0
        rel = err / scale if scale > 0 else (0.0 if err == 0 else math.inf)
        out.append(PartCheck(part, tuple(w64.shape), err, rel, tolerance, err <= tolerance * max(scale, 1e-30)))
    return out


@dataclass
class ChainReport:
    stages: list[str]  # each stage's label (its recipe, with its index when repeated), in order
    tolerance: float  # the chain's: the sum of its stages' tolerances
    checks: list[PartCheck]  # the last stage's outputs vs the float chain
    stage_passed: list[bool] = field(default_factory=list)  # emulated: each stage vs its own graph reference
    cycles: list[int] = field(default_factory=list)  # emulated: each stage's
    reason: str = ""  # why the chain stopped (a stage infeasible or its frontend failed)
    # each stage's outputs by name (what fed the next); only the last stage's when streamed
    # with keep_outputs=False (a whole model's hidden states would be gigabytes)
    outputs: list[dict] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # each stage's frontend: "checked in full", or reused whose

    def notes(self) -> list[str]:
        """How each stage's frontend was checked, runs of alike stages in one line."""
        runs: list[list] = []
        for i, how in enumerate(self.checked):
            if runs and runs[-1][2] == how:
                runs[-1][1] = i
            else:
                runs.append([i, i, how])
        out = [(f"stage {first} ({self.stages[first]})" if first == last else
                f"stages {first}-{last} ({self.stages[first]} ... {self.stages[last]})") + f": frontend {how}"
               for first, last, how in runs]
        if any(how.startswith("reused") for how in self.checked):
            out.append("a reused stage: its own weights, calibration and quantization, not exported again; no "
                       "per-stage, vacuous or integer re-check; the float graph it is quantized from checked against "
                       "its module's forward (calibration's trace); --check-every-layer checks every stage in full")
        return out

    @property
    def passed(self) -> bool:
        return not self.reason and bool(self.checks) and all(c.within_tolerance for c in self.checks) and all(
            self.stage_passed)

    @property
    def total_cycles(self) -> int:
        """The chain's cycles: its stages run one after the other, each its own program."""
        return sum(self.cycles)

    def lines(self) -> list[str]:
        names = self.stages if len(self.stages) <= 4 else [self.stages[0], "...", self.stages[-1]]
        out = [" -> ".join(names) + (f" ({len(self.stages)} stages)" if len(self.stages) > 4 else "") +
               f": {'passed' if self.passed else 'FAILED'}" + (f" ({self.reason})" if self.reason else "")]
        for i, (ok, cycles) in enumerate(zip(self.stage_passed, self.cycles)):
            out.append(f"  stage {i} {self.stages[i]}: {cycles} cycles, "
                       f"{'bit-exact against its graph reference' if ok else 'DIFFERS from its graph reference'}")
        if self.cycles:
            out.append(f"  total: {self.total_cycles} cycles over {len(self.cycles)} stages")
        out += ["  " + c.line() for c in self.checks]
        out += ["  note: " + n for n in self.notes()]
        return out


def check_chain(stages: list[ChainStage], chip=None, mapping=None, reference: list[dict] | None = None,
                keep_outputs: bool = True, on_stage=None,
                check_every_layer: bool = False) -> tuple[ChainReport, ChainReport | None]:
    """The chain in one streamed pass, a stage prepared when its turn comes and let go once
    done (a whole model's layers: one layer's weights alive at a time):
    - the float chain: each stage's frontend runs on the previous stage's *float* outputs, so
      its steps are calibrated and checked on the values the model sees there, and the
      module's forward its check runs is the float chain's (no second float forward);
    - the frontend's graphs (the first report), each run on the previous graph's outputs;
    - with `chip`, the emulator's (the second report): each stage lowered for `chip` with
      `mapping`, emulated on the previous stage's emulated outputs and checked bit for bit
      against its graph reference on those inputs. While every stage so far is bit-exact the
      graphs' chain has had the very same inputs, so its outputs are the emulated ones (the
      check just compared them) and no graph runs twice.
    The last stage's outputs of each against the float chain's (or `reference`'s last, when
    given), within the sum of the stages' tolerances. `on_stage(i, prepared)`: told each
    stage once it is done.

    A repeated structure is checked once (`dse.frontend.repeated`): the first repetition of
    a repeated stage runs its frontend in full; a later one of the same recipe and params
    (but its index) reuses that checked structure with its own weights substituted, its own
    calibration and quantization, and no capture, per-stage, vacuous or integer re-check
    (the float graph it is quantized from is still checked against its module's forward).
    Its emulation and the chain's end are checked as every stage's. `check_every_layer`:
    every repetition in full. The reports' `checked` (and notes) say which was which."""
    names = [s.label for s in stages]
    graphs = ChainReport(names, 0.0, [])
    emulated = ChainReport(names, 0.0, []) if chip is not None else None
    candidate = Candidate(chip, mapping or Mapping()) if chip is not None else None
    floats: dict | None = None
    graph_out: dict | None = None
    emulated_out: dict | None = None
    same = True  # the graphs' chain has had the emulated chain's inputs so far
    structures: dict[str, Any] = {}  # structure key -> the checked structure of its first repetition
    for i, stage in enumerate(stages):
        own = list(_own_inputs(stage))
        key = None
        if stage.repetition and not check_every_layer:
            key = structure_key(model_file(stage.recipe), stage.params, stage.repetition.partition("=")[0], None)
        # The first stage's emulation runs on the very inputs its frontend was checked on: the
        # integer values that check traced are its reference's too (one trace, not two).
        first = floats is None and emulated is not None
        prep = prepare_recipe(stage.recipe, stage.params, inputs=_fed(stage, own, floats),
                              keep_bytes=KEPT_REFERENCE_BYTES if first else 0,
                              remember=(key, stage.label) if key and key not in structures else None,
                              reuse=structures.get(key) if key else None)
        if key and key not in structures and prep.pipe.structure is not None:
            structures[key] = prep.pipe.structure
        prep.pipe.structure = None  # held by `structures` alone
        for report in (graphs, emulated):
            if report is not None:
                report.checked.append(prep.checked)
        if prep.failed:
            for report in (graphs, emulated):
                if report is not None:
                    report.reason = f"{stage.label}: {prep.failed}"
            return graphs, emulated
        floats = _named(stage, _flat(list(prep.pipe.expected)))
        # The steps' earlier graphs hold the float weights again (a real layer's: ~1 GB each);
        # only the last is lowered. This pipeline is ours alone (run on fed inputs: not cached).
        del prep.pipe.graphs[:-1]
        graphs.tolerance += prep.tolerance
        exact = False
        if emulated is not None and not emulated.reason:
            emulated.tolerance += prep.tolerance
            inputs = _fed(stage, own, emulated_out)
            rep = emulate_graph(prep.graph, candidate, inputs, None, prep.tolerance, prep.reference_kind,
                                name=stage.label, parts=prep.parts, keep_image=False,
                                known=prep.pipe.kept if emulated_out is None else None)
            prep.pipe.kept = None
            if not rep.feasible:
                emulated.reason = f"{stage.label}: {rep.reason}"
            else:
                emulated.stage_passed.append(bool(rep.verdict.passed))
                emulated.cycles.append(int(rep.cycles))
                outs = rep.emitted.outputs(rep.result.dram)
                emulated_out = _named(stage, [outs[n] for n in prep.graph.outputs])
                _keep(emulated, emulated_out, keep_outputs)
                exact = same and bool(rep.verdict.outputs_bit_exact)
            del rep
        if exact:
            graph_out = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in emulated_out.items()}
        else:
            graph_out = _named(stage, list(prep.graph.run(*_fed(stage, own, graph_out))))
        same = exact
        _keep(graphs, graph_out, keep_outputs)
        if on_stage is not None:
            on_stage(i, prep)
        del prep
    want = reference[-1] if reference else floats
    graphs.checks = _checks(graph_out, want, graphs.tolerance)
    if emulated is not None and not emulated.reason:
        emulated.checks = _checks(emulated_out, want, emulated.tolerance)
    return graphs, emulated


def _own_inputs(stage: ChainStage) -> tuple:
    return load_recipe(stage.recipe).module.inputs(**stage.params)


def _keep(report: ChainReport, outputs: dict, every: bool) -> None:
    if not every:
        report.outputs.clear()
    report.outputs.append(outputs)


def graph_chain(stages: list[ChainStage], reference: list[dict] | None = None) -> ChainReport:
    """The stages' final graphs (after their recipes' steps) run in PyTorch, each on the
    previous graph's outputs; the last one's outputs against the float chain's."""
    return check_chain(stages, reference=reference)[0]


def emulate_chain(stages: list[ChainStage], chip, mapping=None, reference: list[dict] | None = None) -> ChainReport:
    """Each stage lowered for `chip` with `mapping` and emulated on the previous stage's
    emulated outputs (at the model's shapes); each checked against its own graph reference on
    those inputs, the last one's outputs against the float chain's."""
    return check_chain(stages, chip, mapping, reference)[1]
