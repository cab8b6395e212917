"""The frontend steps a recipe can list, and reading a recipe's list (`steps.toml`).

A recipe folder lists its target-dependent steps, in order, in `steps.toml`:

    [[step]]
    name = "fold_batch_norm"

    [[step]]
    name = "quantize"
    weights = "channel"      # options of the step, checked against its OPTIONS
    tolerance = 0.08

A folder without `steps.toml` gets `DEFAULT_STEPS`. Besides the built-in steps below, a
recipe may bring its own: `frontend/<name>.py` in the recipe folder, defining
`run(graph, ctx, **options) -> Graph` and optionally `OPTIONS` ({option: (type,
default)} or {option: (type, default, allowed values)}) and `TOLERANCE` (relative, against
PyTorch; default FLOAT_TOLERANCE). A built-in name always means the built-in step.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from dse.errors import InputError
from dse.frontend import fold_batch_norm, permute, quantize, select_last_token, split_attention
from dse.workload import load_recipe

FLOAT_TOLERANCE = 1e-5  # max abs error / max |PyTorch| of each output, for steps that keep float32
DEFAULT_STEPS = ("permute", "quantize")
STEPS_FILE = "steps.toml"


@dataclass(frozen=True)
class StepDef:
    name: str
    run: Callable[..., Any]  # (graph, ctx, **options) -> Graph
    options: dict[str, tuple]  # option -> (type, default[, allowed values])
    doc: str
    tolerance: Callable[[dict[str, Any]], float] = lambda options: FLOAT_TOLERANCE
    verify: Callable[..., dict[str, Any]] | None = None  # extra check: (graph, ctx) -> {"passed": bool, ...}
    quantized: bool = False


def _first_line(module: ModuleType) -> str:
    return (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""


BUILTIN: dict[str, StepDef] = {
    "fold_batch_norm": StepDef("fold_batch_norm", fold_batch_norm.run, fold_batch_norm.OPTIONS,
                               _first_line(fold_batch_norm)),
    "permute": StepDef("permute", permute.run, permute.OPTIONS, _first_line(permute)),
    "split_attention": StepDef("split_attention", split_attention.run, split_attention.OPTIONS,
                               _first_line(split_attention)),
    "select_last_token": StepDef("select_last_token", select_last_token.run, select_last_token.OPTIONS,
                                 _first_line(select_last_token)),
    "quantize": StepDef("quantize", quantize.run, quantize.OPTIONS, _first_line(quantize),
                        tolerance=lambda options: options["tolerance"], verify=quantize.verify, quantized=True),
}


@dataclass(frozen=True)
class StepSpec:
    """One step as a recipe lists it: the definition and its options, defaults filled in."""

    definition: StepDef
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def tolerance(self) -> float:
        return self.definition.tolerance(self.options)


def _local_step(folder: Path, name: str, file: Path, field_name: str) -> StepDef | None:
    path = folder / "frontend" / f"{name}.py"
    if not path.is_file():
        return None
    module_name = "dse_recipe_step_" + re.sub(r"\W", "_", str(path))
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise InputError(path, field_name, f"import failed: {type(error).__name__}: {error}",
                         "a step file that imports cleanly") from error
    if not callable(getattr(module, "run", None)):
        raise InputError(path, field_name, "no run()", "frontend/<step>.py defines run(graph, ctx, **options)")
    tolerance = float(getattr(module, "TOLERANCE", FLOAT_TOLERANCE))
    return StepDef(name, module.run, dict(getattr(module, "OPTIONS", {})), _first_line(module),
                   tolerance=lambda options: tolerance)


def available_steps(folder: Path | None = None) -> list[str]:
    names = list(BUILTIN)
    if folder is not None and (folder / "frontend").is_dir():
        names += sorted(p.stem for p in (folder / "frontend").glob("*.py") if p.stem not in BUILTIN
                        and not p.stem.startswith("_"))
    return names


def resolve_step(name: str, options: dict[str, Any], folder: Path | None = None, file: Path | str = "<steps>",
                 field_name: str = "step") -> StepSpec:
    """A step by name with its options checked (InputError names the file, field and allowed values)."""
    definition = BUILTIN.get(name) or (_local_step(folder, name, Path(file), field_name) if folder else None)
    if definition is None:
        raise InputError(file, f"{field_name}.name", name, ", ".join(available_steps(folder)))
    resolved = {}
    for option, value in options.items():
        if option not in definition.options:
            raise InputError(file, f"{field_name}.{option}", value,
                             f"options of {name}: {', '.join(definition.options) or '(none)'}")
    for option, declared in definition.options.items():
        kind, default = declared[0], declared[1]
        allowed = declared[2] if len(declared) > 2 else None
        value = options.get(option, default)
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise InputError(file, f"{field_name}.{option}", value, f"a {kind.__name__}")
        if allowed is not None and value not in allowed:
            raise InputError(file, f"{field_name}.{option}", value, ", ".join(map(str, allowed)))
        if kind is float and not value > 0:
            raise InputError(file, f"{field_name}.{option}", value, "a positive number")
        resolved[option] = value
    return StepSpec(definition, resolved)


def load_steps(folder: Path) -> list[StepSpec]:
    """The steps a recipe folder lists in steps.toml, or DEFAULT_STEPS without one."""
    path = folder / STEPS_FILE
    if not path.is_file():
        return [resolve_step(name, {}, folder, path) for name in DEFAULT_STEPS]
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise InputError(path, "toml", str(error), "valid TOML") from error
    unknown = set(data) - {"step"}
    if unknown:
        raise InputError(path, sorted(unknown)[0], data[sorted(unknown)[0]], "step (an array of [[step]] tables)")
    entries = data.get("step", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise InputError(path, "step", entries, "an array of [[step]] tables")
    steps = []
    for i, entry in enumerate(entries):
        options = dict(entry)
        name = options.pop("name", None)
        if not isinstance(name, str):
            raise InputError(path, f"step[{i}].name", name, ", ".join(available_steps(folder)))
        steps.append(resolve_step(name, options, folder, path, f"step[{i}]"))
    return steps


def parse_step_list(text: str, folder: Path | None = None, source: str = "--steps") -> list[StepSpec]:
    """Steps given on a command line: "fold_batch_norm,quantize:weights=tensor:tolerance=0.1"."""
    steps = []
    for i, item in enumerate(filter(None, (part.strip() for part in text.split(",")))):
        name, *pairs = item.split(":")
        options = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep:
                raise InputError(source, f"step[{i}]", pair, "name:option=value:option=value")
            options[key.strip()] = _value(value.strip())
        steps.append(resolve_step(name.strip(), options, folder, source, f"step[{i}]"))
    return steps


def _value(text: str) -> Any:
    """A command-line option value read as TOML (0.1 is a float, true a bool), else kept as text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def steps_identity(steps: list[StepSpec]) -> list[dict[str, Any]]:
    """Each step as part of a workload's identity: its name, options and the sha256 of the
    file its code lives in (a changed step is other work)."""
    out = []
    for step in steps:
        try:
            source = Path(inspect.getsourcefile(step.definition.run) or "").read_bytes()
        except (OSError, TypeError):
            source = b""
        out.append({"name": step.name, "options": step.options, "code": hashlib.sha256(source).hexdigest()})
    return out


def quantized_steps(recipe: str, choice: str):
    """The recipe's frontend steps with the quantize step's options a mapping sets
    (`Mapping.quantize_choice`: the weight granularity, "+" and the activations' calibration
    rule, then "+" and the activations' scale granularity; any may be empty: "channel",
    "tensor+mse", "+percentile", "++channel")."""
    folder = load_recipe(recipe).path.parent
    steps = load_steps(folder)
    weights, calibration, activations = (choice.split("+") + ["", ""])[:3]
    field, value = next(((f, v) for f, v in (("mapping.quantization", weights), ("mapping.calibration", calibration),
                                             ("mapping.activation_scales", activations)) if v),
                        ("mapping.quantization", choice))
    if not any(step.name == "quantize" for step in steps):
        raise InputError(folder, field, value, "a recipe with a quantize step")
    options = steps[[step.name for step in steps].index("quantize")].definition.options
    chosen = {}
    for name, option, value in (("mapping.quantization", "weights", weights),
                                ("mapping.calibration", "calibration", calibration),
                                ("mapping.activation_scales", "activations", activations)):
        if not value:
            continue
        if value not in options[option][2]:
            raise InputError(folder, name, value, ", ".join(options[option][2]))
        chosen[option] = value
    return [StepSpec(step.definition, {**step.options, **chosen}) if step.name == "quantize" else step
            for step in steps]
