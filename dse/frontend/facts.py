"""What a spec needs to know of a recipe, without importing it when it was asked before.

Validating a spec and naming its workload import the recipe (and so torch) and build its
module: seconds before anything else. The answer depends only on what the graph cache's
key covers (the recipe folder's source, the params, the frontend code, the versions), so
it is kept in that cache (`dse.workload.cache`) under the same kind of key: a rerun of a
recorded sweep reads it and never imports torch. A recipe that fails to import or to
build is an `InputError` and is never kept, so it fails the same way every time.
Importing (`recipe_facts`) and building with given params (`check_builds`) are two
answers, so a spec names the failure of each at the field it always did.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dse.workload import cache as graph_cache
from dse.workload.recipes import full_params, instantiate, load_recipe, model_file


@dataclass(frozen=True)
class RecipeFacts:
    name: str
    source_hash: str  # sha256 hex of the model file's bytes
    full_params: dict[str, Any]  # the params with load()'s and inputs()' defaults filled in
    steps: list[dict[str, Any]]  # the recipe's own steps as identity (dse.frontend.steps.steps_identity)


def recipe_facts(recipe: str | Path, params: dict[str, Any]) -> RecipeFacts:
    """The recipe's name, source hash, full params and steps; InputError when it does not
    import or its steps do not resolve."""
    folder = model_file(recipe).parent
    key = graph_cache.pipeline_key(folder, dict(params), None, kind="recipe-facts")
    cached = graph_cache.load(key)
    if isinstance(cached, RecipeFacts):
        return cached
    from dse.frontend.steps import load_steps, steps_identity

    loaded = load_recipe(recipe)
    facts = RecipeFacts(loaded.name, loaded.source_hash, full_params(loaded, params),
                        steps_identity(load_steps(loaded.path.parent)))
    graph_cache.store(key, facts)
    return facts


def check_builds(recipe: str | Path, params: dict[str, Any]) -> None:
    """The recipe builds with `params` (its load() and inputs() accept them), or the
    InputError `dse.workload.recipes.instantiate` raises; a success is kept."""
    key = graph_cache.pipeline_key(model_file(recipe).parent, dict(params), None, kind="recipe-builds")
    if graph_cache.load(key) is True:
        return

    instantiate(load_recipe(recipe), **params)
    graph_cache.store(key, True)
