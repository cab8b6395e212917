"""Candidates (chip + mapping choices) and the legality rules every stage shares."""

from .candidate import Candidate, Mapping, mapping_from_dict
from .matmul import MatmulShape, TileChoice, TileCheck, check_tiles, framework_tile, tile_grid

__all__ = [
    "Candidate", "Mapping", "mapping_from_dict", "MatmulShape", "TileChoice", "TileCheck",
    "check_tiles", "framework_tile", "tile_grid",
]
