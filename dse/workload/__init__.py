"""The workload layer: capture a recipe's model as a Graph of typed ops with counts."""

from dse.workload.capture import UnsupportedOpError, capture
from dse.workload.graph import KINDS, Graph, Op, OpCounts, TensorSpec, scale_tensor
from dse.workload.recipes import Recipe, capture_recipe, instantiate, list_recipes, load_recipe

__all__ = [
    "KINDS",
    "Graph",
    "Op",
    "OpCounts",
    "Recipe",
    "TensorSpec",
    "UnsupportedOpError",
    "capture",
    "capture_recipe",
    "instantiate",
    "list_recipes",
    "load_recipe",
    "scale_tensor",
]
