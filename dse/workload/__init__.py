"""The workload layer: capture a recipe's model as a Graph of typed ops with counts."""

from dse.workload.capture import UnsupportedOpError, capture
from dse.workload.graph import Graph, Op, OpCounts, TensorSpec
from dse.workload.recipes import Recipe, capture_recipe, list_recipes, load_recipe

__all__ = [
    "Graph",
    "Op",
    "OpCounts",
    "Recipe",
    "TensorSpec",
    "UnsupportedOpError",
    "capture",
    "capture_recipe",
    "list_recipes",
    "load_recipe",
]
