"""Candidates (chip + mapping choices) and the legality rules every stage shares."""

from .candidate import Candidate, Mapping, mapping_from_dict
from .matmul import MatmulShape, TileCheck, check_tiles, framework_tiles, tile_grid
from .params import CandidateArrays

__all__ = [
    "Candidate", "CandidateArrays", "Mapping", "mapping_from_dict", "MatmulShape", "TileCheck",
    "check_tiles", "framework_tiles", "tile_grid",
]
