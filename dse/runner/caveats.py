"""What a decision rests on, said beside it: the evidence kinds it was judged on, in
words, and, when none of them was measured on hardware, the caveat that hardware may
differ.

A decision (or a sweep's proposal) records the metric kinds its acceptance clauses read
(`decision.evidence_kinds`). The analytical model and the emulator are both models of the
chip: a "confirmed" on their figures alone is a prediction. Only imported measurements
(RTL simulation or FPGA cycles, a synthesis or power report: `dse evidence import`) are of
hardware. `hardware_caveat` is the one place that says so; `dse show`, the report and the
UI print its sentence.

Standard library only: `dse show` imports it without pandas.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..records.choices import IMPORTED_METRIC_KINDS

# Measurements of hardware (or of its RTL): evidence the caveat does not apply to.
HARDWARE_KINDS = frozenset(IMPORTED_METRIC_KINDS)
KIND_WORDS = {
    "analytical": "analytical model",
    "emulator_cycles": "emulator cycles",
    "emulator_host_time": "emulator host time",
    "numerics": "numerics against PyTorch",
    "source_counts": "source op counts",
    "rtl_cycles": "RTL simulation cycles",
    "fpga_cycles": "FPGA cycles",
    "synth_area": "synthesis area",
    "power": "power report",
}
CAVEAT = "hardware may differ"


def evidence_kinds(recorded: Any) -> list[str]:
    """A decision's recorded evidence kinds as a list: from the stored JSON text, a list,
    or nothing recorded (None, NaN, "") as []."""
    if recorded is None or (isinstance(recorded, float) and recorded != recorded):
        return []
    if isinstance(recorded, str):
        if not recorded.strip():
            return []
        recorded = json.loads(recorded)
    if recorded is None:
        return []
    return [str(k) for k in recorded]


def kinds_text(recorded: Any) -> str:
    """"analytical model, emulator cycles" (in the order recorded); "not recorded"."""
    kinds = evidence_kinds(recorded)
    return ", ".join(KIND_WORDS.get(k, k) for k in kinds) if kinds else "not recorded"


def hardware_caveat(recorded: Iterable[str] | str | None) -> str | None:
    """The caveat of a decision resting on models only (analytical figures, emulator
    cycles, numerics: no hardware measurement among its evidence kinds); None when a
    hardware kind is among them, or no kinds were recorded (nothing to say which)."""
    kinds = evidence_kinds(recorded)
    if not kinds or HARDWARE_KINDS & set(kinds):
        return None
    return (f"{CAVEAT}: this rests on {kinds_text(kinds)} only, no measurement of hardware "
            f"(RTL, FPGA, synthesis or power report)")
