"""Experiment specs (TOML): hypothesis, acceptance, workload, baseline, space, objectives.

Everything a sweep needs is checked here, before anything is written: the recipe and the
chip exist, every knob value is a valid chip or mapping value, every acceptance expression
and objective names a known metric. A bad spec is an `InputError` naming the file, the
field, the value and what is allowed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import tomllib
import typing
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from emulator.chip import BallKind, ChipConfig
from emulator.costs import default_at

from ..chips import load_chip, override_chip
from ..errors import InputError, close_matches, dotted_loc, dotted_paths, model_keys, read_toml, shown, suggesting
from ..frontend.facts import check_builds, recipe_facts
from ..mapping import Mapping, mapping_from_dict
from ..ppa.components import checked_table
from ..workload.moe import parse_routing
from ..workload.recipes import list_recipes
from .criteria import NAMES, CriterionError, allowed_names, compile_expression
from .limits import capture_limit
from .metrics import METRICS
from .progress import MAX_CANDIDATES, MAX_GRID, TRIALS
from .space import BALL_SET_TARGET, CORE_GROUPS_TARGET, Constraint, Knob, Space, ball_set, core_groups

# A knob over this mapping field sets the granularity of the recipe's quantize step.
QUANTIZATION_TARGET = "mapping.quantization"
CALIBRATION_TARGET = "mapping.calibration"
ACTIVATION_SCALES_TARGET = "mapping.activation_scales"
# Knobs over the workload: a parameter of the recipe (workload.params.<name>: batch, seq,
# image size, ...) or the recipe itself (workload.recipe: an LLM's prefill or decode
# phase); a candidate carries its point as mapping.workload.
WORKLOAD_PARAMS = "workload.params."
WORKLOAD_RECIPE = "workload.recipe"
BALL_KINDS = typing.get_args(BallKind)



class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Link(_Model):
    """An earlier experiment this one builds on, and why."""

    experiment: str = Field(min_length=1)  # its name (or id) in the store the sweep writes to
    reason: str = Field(min_length=1, pattern=r"\S")


class ExperimentPart(_Model):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    hypothesis: str = Field(min_length=1)
    limitations: str = ""
    open_questions: str = ""
    follows: Link | None = None  # takes an earlier experiment's result as its starting point
    reopens: Link | None = None  # revisits an earlier experiment's conclusion with new evidence

    def links(self) -> list[tuple[str, Link]]:
        return [(relation, link) for relation, link in (("follows", self.follows), ("reopens", self.reopens)) if link]


class Criterion(_Model):
    expr: str
    prose: str = ""


class WorkloadStage(_Model):
    """A further stage of the workload, run beside the workload's own (an LLM's decode
    beside its prefill): where, `mapping.placement` says (`dse.plan.placement`)."""

    role: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    recipe: str
    params: dict[str, Any] = {}


class Workload(_Model):
    recipe: str
    params: dict[str, Any] = {}
    # With `stages`: the role of the workload's own stage (it runs first), and the others.
    role: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    stages: list[WorkloadStage] = []
    # A mixture of experts' routing as the analytical model costs it (`dse.analytical.moe`):
    # the recorded inputs' ("measured"), "balanced" or "skew:<s>"; the emulator always follows
    # the recorded one. capacity_factor: tokens an expert takes at most, as a multiple of the
    # balanced share (a routing over it is infeasible, with the reason); None: no capacity.
    routing: str = "measured"
    capacity_factor: float | None = Field(None, gt=0, allow_inf_nan=False)

    @field_validator("routing")
    @classmethod
    def _known_routing(cls, value: str) -> str:
        parse_routing(value)  # ValueError: what is allowed
        return value

    def all_stages(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(role, recipe, params) of every stage, the workload's own first; [] without stages."""
        if not self.stages:
            return []
        return [(self.role, self.recipe, self.params)] + [(s.role, s.recipe, s.params) for s in self.stages]


class Baseline(_Model):
    chip: str
    chip_overrides: dict[str, Any] = {}
    mapping: dict[str, Any] = {}


class HandCandidate(_Model):
    """A hand-picked candidate: the baseline with `set` applied (knob names, or dotted
    chip./mapping. targets), and why it is worth evaluating."""

    why: str = Field(min_length=1, pattern=r"\S")
    set: dict[str, Any] = Field(min_length=1)


class Objective(_Model):
    metric: str
    direction: Literal["minimize", "maximize"] = "minimize"


class Search(_Model):
    # auto: the full grid when it has at most max_grid points, else TPE (one objective) or
    # NSGA-II (several)
    sampler: Literal["auto", "grid", "random", "tpe", "nsga2"] = "auto"
    max_grid: int = Field(MAX_GRID, gt=0)
    trials: int = Field(TRIALS, gt=0)  # new candidates a sampled (non-grid) search may propose
    wall_seconds: float | None = Field(None, gt=0)  # stop proposing after this long
    # A sweep of more candidates is refused before it starts, unless asked for (dse.runner.size).
    max_candidates: int = Field(MAX_CANDIDATES, gt=0)
    batch: int = Field(0, ge=0)  # candidates asked at once (0: chosen from sampler and workers)
    seed: int = Field(0, ge=0, le=2 ** 32 - 1)  # the samplers' (numpy, Optuna) range


class Stages(_Model):
    analytical: Literal["all"] = "all"
    # Which analytically feasible candidates are also emulated: none, the top_k by the first
    # objective, or all. The others are recorded as pruned with the reason.
    emulator: Literal["none", "top_k", "all"] = "none"
    top_k: int = Field(5, gt=0)
    # The analytical model with the newest calibration of the baseline chip in the store
    # (`dse calibrate`: its cycles' constants, and its area and energy factors by component),
    # or uncalibrated.
    calibration: Literal["newest", "none"] = "newest"
    # Area, energy and power beside cycles (`dse.ppa`: CACTI prices the memories); off,
    # the candidates have cycles only (and no CACTI is run).
    ppa: bool = True
    # Time limits, in seconds: the recipe's capture (and its frontend steps), past which
    # the sweep stops with the reason before writing anything; and each candidate's
    # emulator-stage evaluation (in a worker process), past which the candidate is
    # recorded failed with the reason and the sweep goes on. (The analytical stage costs
    # a batch in well under a second: no per-candidate limit.)
    capture_timeout_s: float = Field(600.0, gt=0)
    # While the recipe's code runs (checking the spec, the capture), a line on stderr this
    # often says it is still running and for how long.
    progress_interval_s: float = Field(30.0, gt=0)
    candidate_timeout_s: float = Field(1800.0, gt=0)
    # Raw evidence of emulator runs (outputs, counters, log) is kept beside the store while
    # the evidence folder stays under this size; `dse evidence gc` frees unreferenced files.
    evidence_budget_mb: float = Field(1024.0, ge=0)
    # Each emulated candidate's emulator run is timed this many times (the host time's
    # min and median are recorded; its cycles and outputs come from the first).
    host_time_repeats: int = Field(3, ge=1, le=100)
    # Keep each emulator run's timing trace (itrace, mtrace, pmctrace NDJSON) as raw
    # evidence beside its outputs; the trace comes from one more run of the same program.
    traces: bool = False


class SpecModel(_Model):
    experiment: ExperimentPart
    acceptance: list[Criterion] = []
    workload: Workload
    baseline: Baseline
    space: list[Knob] = []
    candidates: list[HandCandidate] = []  # hand-picked, each with its why; alone or beside a space
    constraints: list[Constraint] = []
    objectives: list[Objective] = Field(min_length=1)
    search: Search = Search()
    stages: Stages = Stages()


class Spec:
    """A validated spec with the baseline resolved into a chip config and a mapping."""

    def __init__(self, path: Path, text: str, model: SpecModel, baseline_chip: ChipConfig, baseline_mapping: Mapping):
        self.path, self.text, self.model = path, text, model
        self.baseline_chip, self.baseline_mapping = baseline_chip, baseline_mapping
        self.hash = hashlib.sha256(text.encode()).hexdigest()
        baseline = {"chip": baseline_chip.model_dump(mode="json"), "mapping": baseline_mapping.model_dump(mode="json")}
        # The experiment's own workload point, the baseline's value of every workload knob.
        facts = recipe_facts(model.workload.recipe, model.workload.params)
        self.baseline_workload = {"recipe": model.workload.recipe, **facts.full_params}
        baseline["workload"] = {"recipe": model.workload.recipe,
                                "params": {k: v for k, v in self.baseline_workload.items() if k != "recipe"}}
        self._balls = {b["kind"]: b for b in baseline["chip"]["balls"]}  # the baseline's Balls, in order
        # Per knob: (name, section, path within the section); read once per candidate.
        self._targets = [(k.name, *k.target.split(".", 1)) for k in model.space]
        # Hand-picked candidates as knob values: a target no knob has becomes a knob of
        # its own name, read by `overrides` like the others.
        knob_of_target = {k.target: k.name for k in model.space}
        knob_names = set(knob_of_target.values())
        self.hand: list[tuple[dict[str, Any], str]] = []
        self.hand_targets: list[str] = []
        target_of_knob = {k.name: k.target for k in model.space}
        for i, candidate in enumerate(model.candidates):
            params = {}
            for key, value in _flattened(candidate.set).items():
                name = key if key in knob_names else knob_of_target.get(key, key)
                if name == key and key not in knob_names and key not in self.hand_targets:
                    self.hand_targets.append(key)
                params[name] = _spelled(target_of_knob.get(name, key), value, path, f"candidates[{i}].set.{key}")
            self.hand.append((params, candidate.why.strip()))
        self._targets += [(t, *t.split(".", 1)) for t in self.hand_targets]
        self.space = Space(model.space, model.constraints,
                           {k.name: self.knob_value(k, baseline) for k in model.space if _has(baseline, k.target)})

    @property
    def name(self) -> str:
        return self.model.experiment.name

    def grid_size(self) -> int:
        return self.space.grid_size()

    def overrides(self, params: dict[str, Any], section: str) -> dict[str, Any]:
        """Knob values as dotted-path overrides of one section ("chip" or "mapping"). A Ball
        set becomes the chip's `balls` list: the baseline's Balls of those kinds."""
        out = {}
        point = {}
        for name, sec, path in self._targets:
            if sec == "workload" and section == "mapping" and name in params:
                point[path.removeprefix("params.")] = params[name]
            if sec == section and name in params:
                value = params[name]
                if sec == "chip" and path == "balls":
                    value = [self._balls[kind] for kind in self._balls if kind in set(value.split(","))]
                if sec == "chip" and f"chip.{path}" == CORE_GROUPS_TARGET and isinstance(value, str):
                    value = json.loads(value)
                out[path] = value
        # A workload point only where it differs from the experiment's own: a candidate at
        # the baseline's point keeps the identity it has without workload knobs.
        point = {k: v for k, v in sorted(point.items()) if self.baseline_workload.get(k) != v}
        if point:
            out["workload"] = point
        return out

    def knob_value(self, knob: Knob, data: dict) -> Any:
        """The value of `knob` in a candidate's {"chip": config, "mapping": mapping}, in the
        knob's own terms (a Ball set as its sorted kinds). KeyError if the field is absent."""
        return self.target_value(knob.target, data)

    def target_value(self, target: str, data: dict) -> Any:
        """The value of the field `target` (a dotted path) in a candidate's data, in a
        knob's terms: a Ball set as its sorted kinds ("matrix,relu"), core groups as their
        canonical JSON; what `dse show` prints as a candidate's change. KeyError if absent."""
        if target.startswith("workload."):
            key = target.removeprefix(WORKLOAD_PARAMS).removeprefix("workload.")
            point = (data.get("mapping") or {}).get("workload") or {}
            return point.get(key, self.baseline_workload[key])
        value = _lookup(data, target)
        if target == BALL_SET_TARGET:
            value = ball_set([b["kind"] for b in value])
        if target == CORE_GROUPS_TARGET:
            value = core_groups(value)
        return value

    def workload_of(self, mapping: dict) -> tuple[str, dict]:
        """(recipe, params) of the workload point a candidate's mapping data names."""
        point = dict(mapping.get("workload") or {})
        recipe = point.pop("recipe", self.model.workload.recipe)
        return recipe, {**self.model.workload.params, **point}

    def apply(self, params: dict[str, Any]) -> tuple[ChipConfig, Mapping]:
        """The baseline with knob values applied (may raise InputError for a bad combination)."""
        chip_over, map_over = self.overrides(params, "chip"), self.overrides(params, "mapping")
        chip = override_chip(self.baseline_chip, chip_over, self.path) if chip_over else self.baseline_chip
        mapping = mapping_from_dict({**self.baseline_mapping.model_dump(mode="json"), **map_over}, str(self.path))
        return chip, mapping


def _spelled(target: str, value: Any, path: Path, field: str) -> Any:
    """A hand-picked value of `target` in the one spelling its knob takes: a Ball set, given
    as a list of kinds or a comma-separated string, as its sorted kinds ("matrix,relu")."""
    if target == BALL_SET_TARGET:
        try:
            return ball_set(value)
        except ValueError:
            raise InputError(path, field, value, "a list of Ball kinds or a comma-separated string, e.g. "
                             "[\"matrix\", \"relu\"] or \"matrix,relu\"") from None
    return value


def _flattened(data: dict, prefix: str = "") -> dict[str, Any]:
    """TOML's dotted keys (`chip.banks.count = 8`) nest; a hand candidate names fields by
    their dotted path."""
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flattened(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# Chip knobs that change what CACTI is asked (memory geometry, technology) or a cost figure.
PRICED_TARGETS = ("chip.banks.", "chip.shared_memory.", "chip.cache.", "chip.technology.", "chip.costs.",
                  "chip.cores.groups")


def _lookup(data: dict, dotted: str) -> Any:
    top = data
    try:
        for part in dotted.split("."):
            data = data[part]
    except KeyError:
        section, _, path = dotted.partition(".")
        if section == "chip" and path.startswith(("technology.", "costs.")) and isinstance(top.get("chip"), dict):
            return default_at(path)  # a section left out of the dump at its defaults
        raise
    return data


def _has(data: dict, dotted: str) -> bool:
    try:
        _lookup(data, dotted)
        return True
    except (KeyError, TypeError):
        return False


def load_spec(path: str | Path) -> Spec:
    """The experiment spec in a TOML file, validated (an `InputError` naming the file, the
    field, the value and what is allowed, else)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "(file)", str(path), "an existing experiment spec TOML file")
    text, data = read_toml(path, "experiment spec TOML file")
    return _validated(path, text, data)


def build_spec(spec: dict[str, Any] | SpecModel, where: str = "<python spec>") -> Spec:
    """An experiment spec built in Python, validated as `load_spec` validates a file: the
    same tables and keys as the TOML (`experiment`, `acceptance`, `workload`, `baseline`,
    `space`, `objectives`, `search`, `stages`, ...) as a dict, or a `SpecModel`. Errors name
    `where` for the file. `run_sweep` takes the result as it takes a path; the store keeps
    the spec as the TOML text it would be written in, so `dse show` and the UI read it alike.

        spec = build_spec({"experiment": {"name": "two-workers", "hypothesis": "..."},
                           "workload": {"recipe": "gemm", "params": {"m": 64, "n": 64, "k": 64}},
                           "baseline": {"chip": "goban", "mapping": {"workers": 1}},
                           "space": [{"name": "workers", "target": "mapping.workers", "values": [1, 2, 4]}],
                           "objectives": [{"metric": "latency_cycles"}]})
    """
    import tomli_w

    if isinstance(spec, SpecModel):
        data = spec.model_dump(mode="json", exclude_none=True, exclude_unset=True)
    elif isinstance(spec, dict):
        data = spec
    else:
        raise InputError(where, "(spec)", type(spec).__name__, "a dict of the spec's tables or a SpecModel")
    try:
        text = tomli_w.dumps(data)
    except (TypeError, ValueError) as error:  # a value TOML cannot hold (None, an object)
        raise InputError(where, "(spec)", str(error)[:200], "tables of TOML values: strings, numbers, booleans, "
                                                             "lists and tables (no None)") from None
    return _validated(Path(where), text, tomllib.loads(text))


def _schema_error(path: Path, errors: list[dict]) -> InputError:
    """One line for the spec's schema errors: an unknown key first (a misspelt one names the
    key it is close to, and the required key of its table it leaves missing), else the first."""
    unknown = next((e for e in errors if e["type"] == "extra_forbidden"), None)
    if unknown is None:
        err = errors[0]
        allowed = err["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
        value = None if err["type"] == "missing" else err.get("input")
        return InputError(path, dotted_loc(err["loc"]), value, allowed)
    loc = tuple(unknown["loc"])
    table, key = loc[:-1], str(loc[-1])
    known = model_keys(SpecModel, table)
    missing = [dotted_loc(e["loc"]) for e in errors if e["type"] == "missing" and tuple(e["loc"][:-1]) == table]
    allowed = (f"a key of [{dotted_loc(table)}]" if table else "a top-level table") + ": " + ", ".join(known)
    if missing:
        allowed += "; required and missing: " + ", ".join(missing)
    return InputError(path, dotted_loc(loc), key, allowed, close_matches(key, known))


def _check_recipe(path: Path, field: str, recipe: str) -> None:
    """A shipped recipe's name or a recipe folder."""
    if recipe not in list_recipes() and not Path(recipe).exists():
        raise suggesting(path, field, recipe, "one of " + ", ".join(list_recipes()) + " or a recipe folder",
                         list_recipes())


def _validated(path: Path, text: str, data: dict) -> Spec:
    try:
        model = SpecModel.model_validate(data)
    except ValidationError as exc:
        raise _schema_error(path, exc.errors()) from None

    _check_recipe(path, "workload.recipe", model.workload.recipe)
    # The recipe's code runs from here (its import, load(), inputs()): under the capture's
    # time limit, saying while it runs that it does.
    with capture_limit(path, model.stages, f"checking recipe '{model.workload.recipe}' (its import, load() "
                       "and inputs())"):
        return _checked(path, text, model)


def _checked(path: Path, text: str, model: SpecModel) -> Spec:
    recipe_facts(model.workload.recipe, model.workload.params)  # it imports, its steps resolve
    try:
        chip = load_chip(model.baseline.chip, model.baseline.chip_overrides, overrides_source=path)
    except InputError as exc:
        if exc.field == "chip":  # an unknown chip: name the spec's field, not the chips folder
            raise InputError(path, "baseline.chip", exc.value, exc.allowed, exc.suggestions) from None
        raise
    if model.stages.ppa:
        checked_table(chip, path, "baseline.chip.")  # every component priced: CACTI organises its memories
    mapping = mapping_from_dict(model.baseline.mapping, str(path), field_prefix="baseline.mapping.")
    for field, value, allowed in Space.check(model.space, model.constraints):
        raise InputError(path, field, value, allowed)
    spec = Spec(path, text, model, chip, mapping)
    if mapping.quantization is not None:
        _check_quantize_step(spec, "baseline.mapping.quantization", mapping.quantization)
    if mapping.calibration is not None:
        _check_quantize_step(spec, "baseline.mapping.calibration", mapping.calibration)
    _check_knobs(spec)
    _check_hand_candidates(spec)
    _check_metrics(spec)
    _dry_run_expressions(spec)
    _check_recipe_params(spec)
    _check_stages(spec)
    return spec


# Knobs a staged workload cannot take yet: each names a graph per candidate, not per stage.
UNSTAGED_TARGETS = ("workload.", "mapping.quantization", "mapping.calibration", "mapping.activation_scales",
                    "mapping.partition")


def _check_stages(spec: Spec) -> None:
    """A staged workload (`workload.stages`): its own stage's role, every stage's recipe and
    params (as `_check_recipe_params`), roles distinct; knobs that would change one stage's
    graph are not supported with stages."""
    w = spec.model.workload
    if not w.stages:
        if w.role is not None:
            raise InputError(spec.path, "workload.role", w.role, "a role only beside workload.stages")
        return
    if w.role is None:
        raise InputError(spec.path, "workload.role", None,
                         "the role of the workload's own stage (e.g. \"prefill\") when workload.stages is given")
    roles = [w.role]
    for i, stage in enumerate(w.stages):
        field = f"workload.stages[{i}]"
        if stage.role in roles:
            raise InputError(spec.path, f"{field}.role", stage.role, "a role no other stage has")
        roles.append(stage.role)
        _check_recipe(spec.path, f"{field}.recipe", stage.recipe)
        try:
            check_builds(stage.recipe, stage.params)
        except InputError as exc:
            raise InputError(spec.path, f"{field}.params ({exc.field})", stage.params, exc.allowed, exc.suggestions) from None
    targets = [(f"space[{i}].target", k.target) for i, k in enumerate(spec.model.space)]
    targets += [("candidates.set", t) for t in spec.hand_targets]
    for field, target in targets:
        if target.startswith(UNSTAGED_TARGETS):
            raise InputError(spec.path, field, target, "a chip or mapping knob that changes no stage's graph "
                             "(workload, quantization and partition knobs are not supported with workload.stages)")
    for key in ("quantization", "partition"):
        if getattr(spec.baseline_mapping, key) is not None:
            raise InputError(spec.path, f"baseline.mapping.{key}", getattr(spec.baseline_mapping, key),
                             "unset with workload.stages")


def _dry_run_expressions(spec: Spec) -> None:
    """Every condition and constraint evaluated on the baseline's knob values, every
    acceptance expression on metrics of 1: a division by zero or a comparison of a string
    with a number is the spec's error, found before anything is written."""
    space = spec.space
    values = space.full({})
    checks = [(f"space[{i}].when", k.when, space._when_formulas[k.name], values)
              for i, k in enumerate(spec.model.space) if k.when]
    checks += [(f"constraints[{i}].expr", c.expr, f, values)
               for i, (c, f) in enumerate(zip(space.constraints, space._constraint_formulas))]
    checks += [(f"acceptance[{i}].expr", c.expr, clause.formula, dict.fromkeys(NAMES, 1.0))
               for i, c in enumerate(spec.model.acceptance) for clause in compile_expression(i, c.expr)]
    for field, text, formula, args in checks:
        try:
            with np.errstate(all="ignore"):
                bool(formula(**args))
        except Exception as exc:  # noqa: BLE001 - any failure of a user's expression is the spec's
            raise InputError(spec.path, field, text, "an expression that evaluates on the baseline's values "
                             f"({type(exc).__name__}: {exc})") from None


def _check_recipe_params(spec: Spec) -> None:
    """The recipe built with the spec's params (load() and inputs()): a value it rejects is
    the spec's error (`workload.params`), found before anything is written."""
    try:
        check_builds(spec.model.workload.recipe, spec.model.workload.params)
    except InputError as exc:
        raise InputError(spec.path, f"workload.params ({exc.field})", spec.model.workload.params, exc.allowed, exc.suggestions) from None


def _check_knobs(spec: Spec) -> None:
    names = set()
    for i, knob in enumerate(spec.model.space):
        if knob.name in names:
            raise InputError(spec.path, f"space[{i}].name", knob.name, "a name not used by another knob")
        names.add(knob.name)
        if knob.target.startswith("workload."):
            _check_workload_knob(spec, i, knob)
            continue
        if knob.name not in spec.space.baseline_values:
            raise suggesting(spec.path, f"space[{i}].target", knob.target, "a field of the chip config or the mapping",
                             _targets(spec))
        if knob.target == BALL_SET_TARGET:
            _check_ball_sets(spec, i, knob)
        if knob.target in (QUANTIZATION_TARGET, CALIBRATION_TARGET, ACTIVATION_SCALES_TARGET):
            _check_quantize_step(spec, f"space[{i}].target", knob.target)
        if knob.grid_count() is None and spec.model.search.sampler == "grid":
            raise InputError(spec.path, f"space[{i}]", knob.name, "a float knob with step or grid_points for a grid")
        # Each value alone on the baseline must be a valid config: a typo or a zero size is
        # the spec's error, found now rather than as a failed candidate later. Ranges are
        # checked at their ends.
        for value in knob.values if knob.type == "categorical" else [_whole(knob.low, knob), _whole(knob.high, knob)]:
            try:
                chip, _ = spec.apply({knob.name: value})
                if spec.model.stages.ppa and knob.target.startswith(PRICED_TARGETS):  # a geometry CACTI refuses
                    checked_table(chip, spec.path)
            except InputError as exc:
                raise InputError(spec.path, f"space[{i}] ({knob.name}) -> {exc.field}", value, exc.allowed, exc.suggestions) from None


def _targets(spec: Spec) -> list[str]:
    """Every dotted field a knob may target: the baseline chip's and mapping's (the choices a
    misspelt target is matched against)."""
    return [*dotted_paths(spec.baseline_chip.model_dump(mode="json"), "chip."),
            *(f"mapping.{f}" for f in spec.baseline_mapping.model_dump(mode="json"))]


def _check_hand_candidates(spec: Spec) -> None:
    """Each hand-picked candidate names knobs or existing chip/mapping fields, with values
    valid on the baseline (a bad one is the spec's error, not a failed candidate)."""
    baseline = {"chip": spec.baseline_chip.model_dump(mode="json"), "mapping": spec.baseline_mapping.model_dump(mode="json")}
    knob_names = {k.name for k in spec.model.space}
    targets = {k.name: k.target for k in spec.model.space}
    for i, (params, _) in enumerate(spec.hand):
        for key in params:
            if key in knob_names:
                continue
            section = key.split(".", 1)[0]
            if section not in ("chip", "mapping") or not (_has(baseline, key) or section == "mapping"):
                raise suggesting(spec.path, f"candidates[{i}].set", key,
                                 "a knob name (" + (", ".join(sorted(knob_names)) or "none") +
                                 ") or a field of the chip config (chip.<path>) or the mapping (mapping.<field>)",
                                 [*knob_names, *_targets(spec)])
        for key, value in params.items():
            if targets.get(key, key) == BALL_SET_TARGET:
                _check_ball_set(spec, f"candidates[{i}].set.{key}", value)
        try:
            spec.apply(params)
        except InputError as exc:
            raise InputError(spec.path, f"candidates[{i}].set -> {exc.field}", exc.value, exc.allowed, exc.suggestions) from None


def _check_workload_knob(spec: Spec, i: int, knob: Knob) -> None:
    """A workload knob names a parameter the recipe takes (or the recipe itself), and each
    of its values builds the recipe (load() and inputs()); found before anything is written."""
    recipe = recipe_facts(spec.model.workload.recipe, spec.model.workload.params)
    if knob.target != WORKLOAD_RECIPE:
        name = knob.target.removeprefix(WORKLOAD_PARAMS)
        takes = [k for k in spec.baseline_workload if k != "recipe"]
        if not knob.target.startswith(WORKLOAD_PARAMS) or name not in takes:
            raise InputError(spec.path, f"space[{i}].target", knob.target,
                             f"workload.recipe or workload.params.<a parameter recipe {recipe.name} takes: "
                             f"{', '.join(takes) or 'none'}>")
    if knob.type != "categorical" and knob.target == WORKLOAD_RECIPE:
        raise InputError(spec.path, f"space[{i}].values", knob.low, "a list of recipe names")
    values = knob.grid_values() if knob.type == "categorical" else [_whole(knob.low, knob), _whole(knob.high, knob)]
    for value in values:
        recipe_name, params = spec.workload_of({"workload": {knob.target.removeprefix(WORKLOAD_PARAMS)
                                                             .removeprefix("workload."): value}})
        _check_recipe(spec.path, f"space[{i}].values", recipe_name)
        try:
            recipe_facts(recipe_name, params)
            check_builds(recipe_name, params)
        except InputError as exc:
            raise InputError(spec.path, f"space[{i}] ({knob.name}) -> workload.params ({exc.field})", value,
                             exc.allowed, exc.suggestions) from None


def _check_ball_sets(spec: Spec, i: int, knob: Knob) -> None:
    """Every Ball named must be one the baseline chip has (a set only removes Balls: a new
    one would need its ports and latency, which a chip config gives)."""
    for value in knob.values:
        _check_ball_set(spec, f"space[{i}].values", value)


def _check_ball_set(spec: Spec, field: str, value: str) -> None:
    """Every kind of a Ball set (its one spelling, "matrix,relu") is a Ball of the baseline chip."""
    have = list(spec._balls)
    for kind in value.split(",") if value else []:
        if kind not in have:
            known = "" if kind in BALL_KINDS else f" (not a Ball kind at all; kinds: {', '.join(BALL_KINDS)})"
            raise InputError(spec.path, field, kind,
                             f"Balls of the baseline chip {spec.baseline_chip.name}: {', '.join(have)}{known}")


def _check_quantize_step(spec: Spec, field: str, value: Any) -> None:
    """A quantization granularity, calibration rule or activation scale sets the recipe's quantize step: the
    recipe needs one."""
    recipe = recipe_facts(spec.model.workload.recipe, spec.model.workload.params)
    steps = [step["name"] for step in recipe.steps]
    if "quantize" not in steps:
        raise InputError(spec.path, field, value,
                         f"a recipe with a quantize step (recipe {recipe.name} runs: {', '.join(steps) or 'no steps'})")


def _whole(value: float, knob: Knob) -> Any:
    return int(value) if knob.type == "int" else float(value)


def _check_metrics(spec: Spec) -> None:
    for i, obj in enumerate(spec.model.objectives):
        if obj.metric not in METRICS:
            raise suggesting(spec.path, f"objectives[{i}].metric", obj.metric, "one of " + ", ".join(METRICS), METRICS)
    for i, crit in enumerate(spec.model.acceptance):
        try:
            compile_expression(i, crit.expr)
        except CriterionError as exc:
            raise InputError(spec.path, f"acceptance[{i}].expr", crit.expr, f"{allowed_names()} ({exc})") from None


def spec_changes(old_text: str, new_text: str, limit: int = 8) -> str:
    """What an edited spec changes of a recorded one, one clause a field ("search.trials: 40 ->
    60; space[1].values: [1, 2] -> [1, 2, 4]"), at most `limit` of them; or that only
    comments or layout differ."""
    try:
        old, new = _leaves(tomllib.loads(old_text)), _leaves(tomllib.loads(new_text))
    except tomllib.TOMLDecodeError:
        return "the recorded spec's text cannot be read as TOML"
    absent = object()
    changed = [(k, old.get(k, absent), new.get(k, absent)) for k in dict.fromkeys([*old, *new])
               if old.get(k, absent) != new.get(k, absent)]
    if not changed:
        return "the same fields and values (only comments or layout differ)"

    def said(value: Any) -> str:
        return "(absent)" if value is absent else shown(value, 60)

    out = "; ".join(f"{k}: {said(a)} -> {said(b)}" for k, a, b in changed[:limit])
    more = len(changed) - limit
    return f"{len(changed)} field{'s' if len(changed) > 1 else ''} changed: {out}" + (f"; and {more} more" if more > 0 else "")


def _leaves(data: Any, prefix: str = "") -> dict[str, Any]:
    """A TOML document's values by dotted path, tables of arrays indexed (`space[1].values`)."""
    if isinstance(data, dict):
        return {k: v for key, value in data.items() for k, v in _leaves(value, f"{prefix}.{key}" if prefix else key).items()}
    if isinstance(data, list) and data and all(isinstance(d, dict) for d in data):
        return {k: v for i, value in enumerate(data) for k, v in _leaves(value, f"{prefix}[{i}]").items()}
    return {prefix: data}


@functools.lru_cache(maxsize=1)
def _torch_version() -> str:
    """torch's installed version, read once a process (a metadata scan of sys.path)."""
    return version("torch")


def workload_parts(spec: Spec) -> dict:
    """What the experiment's workload identity covers (`dse.identity.workload_identity`'s
    arguments): the recipe's source, its full params, its frontend steps, torch's version."""
    def parts(name: str, params: dict) -> dict:
        facts = recipe_facts(name, params)
        return dict(recipe_source_hash=facts.source_hash, params=facts.full_params, steps=facts.steps)

    w = spec.model.workload
    # torch's version from its metadata (the same text as torch.__version__), without importing it
    out = dict(parts(w.recipe, w.params), torch_version=_torch_version())
    if w.stages:  # the staged workload's other stages, by role (the own stage's role too)
        out["stages"] = [{"role": w.role}] + [{"role": s.role, "recipe": s.recipe, **parts(s.recipe, s.params)}
                                              for s in w.stages]
    if w.routing != "measured" or w.capacity_factor is not None:  # the figures of another routing
        out["routing"] = {"routing": w.routing, "capacity_factor": w.capacity_factor}
    return out
