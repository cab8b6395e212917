"""What a stage of the chain is, and how stages run one after another."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable
    doc: str


def run_stages(stages: Sequence[Stage], *inputs):
    """The first stage on `inputs`, every next one on the output of the one before."""
    value = stages[0].run(*inputs)
    for stage in stages[1:]:
        value = stage.run(value)
    return value
