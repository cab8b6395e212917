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

CHAIN_FILE = "chain.toml"


@dataclass(frozen=True)
class ChainStage:
    recipe: str
    params: dict
    feeds: dict[str, str] = field(default_factory=dict)  # input name -> previous stage's output name


def _forward_inputs(recipe: str) -> list[str]:
    """The names of the recipe's graph inputs, as its module's forward names them."""
    from ..workload.recipes import load_recipe

    module = load_recipe(recipe).module
    cls = inspect.signature(module.load).return_annotation
    forward = getattr(cls, "forward", None) if isinstance(cls, type) else None
    if forward is None:  # not annotated: the module itself, loaded with its defaults
        forward = type(module.load()).forward
    return [p for p in inspect.signature(forward).parameters if p != "self"]


def _outputs(recipe: str) -> list[str] | None:
    from ..workload.recipes import load_recipe

    names = getattr(load_recipe(recipe).module, "OUTPUTS", None)
    return list(names) if isinstance(names, (tuple, list)) else None


def load_chain(path: str | Path) -> list[ChainStage]:
    """A chain file (or a recipe folder holding one), checked: each stage's recipe exists,
    each feed names an input of its graph and an output of the previous stage's model."""
    from ..workload.recipes import model_file

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
    if not isinstance(stages, list) or len(stages) < 2:
        raise InputError(path, "stage", stages, "two or more [[stage]] tables")
    out: list[ChainStage] = []
    for i, s in enumerate(stages):
        where = f"stage[{i}]"
        if not isinstance(s, dict) or set(s) - {"recipe", "params", "feeds"} or not isinstance(s.get("recipe"), str):
            raise InputError(path, where, s, "a table with recipe (a name), params and feeds (from the second on)")
        model_file(s["recipe"])  # an unknown recipe: its own one-line error
        params, feeds = s.get("params", {}), s.get("feeds", {})
        if not isinstance(params, dict) or not isinstance(feeds, dict):
            raise InputError(path, f"{where}.params/feeds", (params, feeds), "tables")
        if i == 0 and feeds:
            raise InputError(path, f"{where}.feeds", feeds, "none: the first stage has no previous stage")
        if i > 0:
            if not feeds:
                raise InputError(path, f"{where}.feeds", feeds, "at least one input fed by the previous stage")
            inputs, previous = _forward_inputs(s["recipe"]), _outputs(out[-1].recipe)
            for name, source in feeds.items():
                if name not in inputs:
                    raise InputError(path, f"{where}.feeds", name, f"an input of {s['recipe']}: {', '.join(inputs)}")
                if previous is None or source not in previous:
                    raise InputError(path, f"{where}.feeds.{name}", source,
                                     f"an output of {out[-1].recipe} (its OUTPUTS): {', '.join(previous or ['(none named)'])}")
        out.append(ChainStage(s["recipe"], dict(params), dict(feeds)))
    return out


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
    from ..workload.recipes import load_recipe

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
    stages: list[str]  # "recipe" of each stage, in order
    tolerance: float  # the chain's: the sum of its stages' tolerances
    checks: list[PartCheck]  # the last stage's outputs vs the float chain
    stage_passed: list[bool] = field(default_factory=list)  # emulated: each stage vs its own graph reference
    cycles: list[int] = field(default_factory=list)  # emulated: each stage's
    reason: str = ""  # why the chain stopped (a stage infeasible or its frontend failed)
    outputs: list[dict] = field(default_factory=list)  # each stage's outputs by name (what fed the next)

    @property
    def passed(self) -> bool:
        return not self.reason and bool(self.checks) and all(c.within_tolerance for c in self.checks) and all(
            self.stage_passed)

    def lines(self) -> list[str]:
        out = [" -> ".join(self.stages) + f": {'passed' if self.passed else 'FAILED'}" +
               (f" ({self.reason})" if self.reason else "")]
        for i, (ok, cycles) in enumerate(zip(self.stage_passed, self.cycles)):
            out.append(f"  stage {i} {self.stages[i]}: {cycles} cycles, "
                       f"{'bit-exact against its graph reference' if ok else 'DIFFERS from its graph reference'}")
        out += ["  " + c.line() for c in self.checks]
        return out


def _prepared(stages: list[ChainStage]):
    from .run import prepare_recipe

    return [prepare_recipe(s.recipe, s.params) for s in stages]


def graph_chain(stages: list[ChainStage], reference: list[dict] | None = None) -> ChainReport:
    """The stages' final graphs (after their recipes' steps) run in PyTorch, each on the
    previous graph's outputs; the last one's outputs against the float chain's."""
    reference = reference or float_chain(stages)
    preps = _prepared(stages)
    names = [s.recipe for s in stages]
    tolerance = sum(p.tolerance for p in preps)
    failed = next((p.failed for p in preps if p.failed), "")
    if failed:
        return ChainReport(names, tolerance, [], reason=failed)
    outputs: list[dict] = []
    for stage, prep in zip(stages, preps):
        inputs = _fed(stage, prep.inputs, outputs[-1] if outputs else None)
        outputs.append(_named(stage, list(prep.graph.run(*inputs))))
    return ChainReport(names, tolerance, _checks(outputs[-1], reference[-1], tolerance), outputs=outputs)


def emulate_chain(stages: list[ChainStage], chip, mapping=None, reference: list[dict] | None = None) -> ChainReport:
    """Each stage lowered for `chip` with `mapping` and emulated on the previous stage's
    emulated outputs (at the model's shapes); each checked against its own graph reference on
    those inputs, the last one's outputs against the float chain's."""
    from ..mapping import Candidate, Mapping
    from .run import emulate_graph

    reference = reference or float_chain(stages)
    preps = _prepared(stages)
    names = [s.recipe for s in stages]
    report = ChainReport(names, sum(p.tolerance for p in preps), [])
    failed = next((p.failed for p in preps if p.failed), "")
    if failed:
        report.reason = failed
        return report
    cand = Candidate(chip, mapping or Mapping())
    for stage, prep in zip(stages, preps):
        inputs = _fed(stage, prep.inputs, report.outputs[-1] if report.outputs else None)
        rep = emulate_graph(prep.graph, cand, inputs, None, prep.tolerance, prep.reference_kind, name=stage.recipe,
                            parts=prep.parts)
        if not rep.feasible:
            report.reason = f"{stage.recipe}: {rep.reason}"
            return report
        report.stage_passed.append(bool(rep.verdict.passed))
        report.cycles.append(int(rep.cycles))
        outs = rep.emitted.outputs(rep.result.dram)
        report.outputs.append(_named(stage, [outs[n] for n in prep.graph.outputs]))
    report.checks = _checks(report.outputs[-1], reference[-1], report.tolerance)
    return report
