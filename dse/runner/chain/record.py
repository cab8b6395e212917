"""The record stage: the rows written for finished runs."""

from __future__ import annotations

from typing import Sequence

from ..stages import Outcome
from .stage import Stage


def record(outcomes: Sequence[Outcome]) -> list[dict]:
    """The results Store.finish_runs takes, one per outcome."""
    return [dict(run_id=o.run_id, status=o.status, metrics=o.metrics, reason=o.reason or None,
                 error=o.error or None, traceback=o.traceback or None) for o in outcomes]


RECORD = Stage(
    "record", record,
    "the rows written for finished runs")
