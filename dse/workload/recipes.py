"""Recipes: `recipes/<name>/model.py`, each with `load(**params)` and `inputs(**params)`."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from dse.errors import InputError, close_matches, suggesting

if TYPE_CHECKING:  # torch loads with the first recipe: finding one and its cached facts need none
    import torch

    from dse.workload.graph import Graph

RECIPES_DIR = Path(__file__).resolve().parents[2] / "recipes"
_REQUIRED = ("load", "inputs")


@dataclass
class Recipe:
    name: str
    path: Path  # the model.py
    module: ModuleType
    source_hash: str  # sha256 hex of model.py's bytes


def list_recipes() -> list[str]:
    if not RECIPES_DIR.is_dir():
        return []
    return sorted(d.name for d in RECIPES_DIR.iterdir() if (d / "model.py").is_file())


def _model_file(name_or_path: str | Path) -> Path | None:
    """A recipe name, a recipe folder or a .py file; None when nothing is there."""
    given = Path(name_or_path)
    candidates = [given / "model.py", given] if given.suffix != ".py" else [given]
    if isinstance(name_or_path, str) and "/" not in name_or_path and given.suffix != ".py":
        candidates.insert(0, RECIPES_DIR / name_or_path / "model.py")
    return next((c.resolve() for c in candidates if c.is_file()), None)


# A chained recipe's file (`dse.numerics.chain`): stages where one graph's outputs feed the next.
CHAIN_FILE = "chain.toml"


def chain_file(name_or_path: str | Path) -> Path | None:
    """The chain file `name_or_path` names (a .toml file, a folder holding one and no model.py,
    or a shipped chain's name such as ``llama3_8b``); None when it names no chain."""
    for path in (Path(name_or_path), RECIPES_DIR / str(name_or_path)):
        if path.is_file() and path.suffix == ".toml":
            return path
        if path.is_dir() and (path / CHAIN_FILE).is_file() and not (path / "model.py").exists():
            return path / CHAIN_FILE
    return None


def model_file(name_or_path: str | Path) -> Path:
    """The recipe's model file (not imported); InputError when there is none."""
    path = _model_file(name_or_path)
    if path is None:
        looked_in = RECIPES_DIR if Path(name_or_path).parent == Path(".") else Path(name_or_path)
        raise suggesting(looked_in, "workload.recipe", str(name_or_path), ", ".join(list_recipes()) or "(none)",
                         list_recipes())
    return path


def recipe_name(name_or_path: str | Path) -> str:
    """The recipe's name as `load_recipe` gives it, without importing it."""
    path = model_file(name_or_path)
    return path.parent.name if path.name == "model.py" else path.stem


def load_recipe(name_or_path: str | Path) -> Recipe:
    path = model_file(name_or_path)
    name = path.parent.name if path.name == "model.py" else path.stem
    data = path.read_bytes()
    source_hash = hashlib.sha256(data).hexdigest()
    # A unique module name per file and content: hyphens are fine, and two recipes
    # (or two versions of one) never share a sys.modules entry.
    module_name = "dse_recipe_" + re.sub(r"\W", "_", name) + "_" + source_hash[:12]
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up there
    from dse.workload.libraries import prepare_torchvision

    prepare_torchvision()  # a recipe may import torchvision (or timm, which does)
    try:
        spec.loader.exec_module(module)
    except SystemExit as error:  # sys.exit() in the recipe's code ends no dse command
        del sys.modules[module_name]
        raise InputError(path, "workload.recipe", f"import called sys.exit({error.code!r})",
                         "a model.py that imports cleanly (never exits the process)") from None
    except Exception as error:
        del sys.modules[module_name]
        raise InputError(path, "workload.recipe", f"import failed: {type(error).__name__}: {error}",
                         "a model.py that imports cleanly") from error
    for attr in _REQUIRED:
        if not callable(getattr(module, attr, None)):
            raise InputError(path, f"workload.recipe.{attr}", "missing",
                             "model.py defines load(**params) -> nn.Module and inputs(**params) -> tuple")
    return Recipe(name=name, path=path, module=module, source_hash=source_hash)


def _check_params(recipe: Recipe, params: dict[str, Any]) -> None:
    for attr in _REQUIRED:
        signature = inspect.signature(getattr(recipe.module, attr))
        if any(p.kind == p.VAR_KEYWORD for p in signature.parameters.values()):
            continue
        unknown = sorted(set(params) - set(signature.parameters))
        if unknown:
            raise InputError(recipe.path, "workload.params", ", ".join(unknown),
                             f"parameters of {attr}{signature}",
                             [m for name in unknown for m in close_matches(name, signature.parameters)])


def full_params(recipe: Recipe, params: dict[str, Any]) -> dict[str, Any]:
    """`params` with the defaults of the recipe's load() and inputs() filled in: the
    parameters the workload is really built with."""
    out: dict[str, Any] = {}
    for attr in _REQUIRED:
        for name, p in inspect.signature(getattr(recipe.module, attr)).parameters.items():
            if p.default is not p.empty and name not in out:
                out[name] = p.default
    return {**out, **params}


def instantiate(recipe: Recipe, **params: Any) -> tuple[torch.nn.Module, tuple]:
    """The recipe's module (`load(**params)`) and example inputs (`inputs(**params)`)."""
    import torch

    _check_params(recipe, params)
    example_inputs = _call(recipe, "inputs", params)
    module = _call(recipe, "load", params)
    if isinstance(example_inputs, torch.Tensor):  # a lone tensor is one input, not a tuple of rows
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)) or not all(
            isinstance(x, torch.Tensor) for x in example_inputs):
        raise InputError(recipe.path, f"recipe {recipe.name}: inputs()", _kind(example_inputs),
                         "a tensor or a tuple of tensors (the model's example inputs)")
    if not isinstance(module, torch.nn.Module):
        raise InputError(recipe.path, f"recipe {recipe.name}: load()", _kind(module), "a torch.nn.Module")
    return module, tuple(example_inputs)


def run_module(recipe: Recipe, module: torch.nn.Module, inputs: tuple) -> Any:
    """The module on its example inputs (PyTorch's reference); a forward that raises is the
    recipe's error: one `InputError` naming the recipe and the error."""
    import torch

    try:
        with torch.no_grad():
            return module(*inputs)
    except KeyboardInterrupt:
        raise
    except SystemExit as error:
        raise InputError(recipe.path, f"recipe {recipe.name}: the model's forward on inputs()",
                         f"sys.exit({error.code!r})", "a forward that returns") from None
    except Exception as error:  # noqa: BLE001 - the model is user code
        message = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        raise InputError(recipe.path, f"recipe {recipe.name}: the model's forward on inputs()", message,
                         "a model whose forward runs on its example inputs") from error


def _call(recipe: Recipe, attr: str, params: dict[str, Any]) -> Any:
    """`recipe.module.<attr>(**params)`; whatever it raises is the recipe's (or its
    parameters') error: one `InputError` naming the recipe, the function and the error."""
    try:
        return getattr(recipe.module, attr)(**params)
    except KeyboardInterrupt:
        raise
    except SystemExit as error:  # sys.exit() in the recipe's code ends no dse command
        raise InputError(recipe.path, f"recipe {recipe.name}: {attr}(**workload.params)", params,
                         f"a call that returns (it called sys.exit({error.code!r}))") from None
    except Exception as error:  # noqa: BLE001 - the recipe is user code: any failure is its input's
        what = "values it accepts" if isinstance(error, (TypeError, ValueError)) else "a call that succeeds"
        message = " ".join(f"{type(error).__name__}: {error}".split())[:300]
        raise InputError(recipe.path, f"recipe {recipe.name}: {attr}(**workload.params)", params,
                         f"{what} ({message})") from error


def _kind(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__} of " + ", ".join(sorted({type(x).__name__ for x in value}) or ["nothing"])
    return type(value).__name__


def capture_recipe(name_or_path: str | Path, **params: Any) -> Graph:
    recipe = load_recipe(name_or_path)
    module, example_inputs = instantiate(recipe, **params)
    from dse.workload.capture import capture

    return capture(module, *example_inputs, name=recipe.name, source_path=recipe.path)


def output_parts(recipe: str | Path, count: int) -> list[str] | None:
    """The model's names of its graph's `count` outputs, in order (``OUTPUTS`` in its
    model.py, e.g. ``("logits", "k_cache", "v_cache")``: the numerics checks each part on its
    own under that name); None when the model names none, or not that many."""
    names = getattr(load_recipe(recipe).module, "OUTPUTS", None)
    if not isinstance(names, (tuple, list)) or len(names) != count or not all(isinstance(n, str) for n in names):
        return None
    return list(names)


def recipe_doc(recipe: Recipe) -> str:
    """The first sentence of the model file's docstring, on one line."""
    paragraph = " ".join((recipe.module.__doc__ or "").strip().split("\n\n")[0].split())
    sentence, dot, _ = paragraph.partition(". ")
    return sentence + "." if dot else paragraph
