"""The emulator stage: the recipe's frontend steps once per sweep, then, per candidate,
lowering + emulation + the numerics check against PyTorch (`dse.numerics`).

A candidate's emulator run records its evidence under kinds of its own: emulator cycles
and counters (`emulator_cycles`), host time (`emulator_host_time`) and the numerics
verdict (`numerics`); they are never merged with the analytical estimate.
"""

from __future__ import annotations

import functools
import json
import traceback as tb
from dataclasses import dataclass
from typing import Any

from ..mapping import Candidate


STALL_CAUSES = ("dependence", "ball_queue", "channel", "dma", "fence", "barrier", "rob_full", "frontend")


@dataclass
class EmulationWorkload:
    """What every emulated candidate shares: the graph after the recipe's steps, its
    example inputs, and the references its outputs are checked against."""

    graph: Any
    inputs: list
    expected: list | None
    tolerance: float
    reference_kind: str  # "quantized": integer path bit for bit; "float": within tolerance
    reference: dict | None = None  # every tensor of the graph on the inputs, computed once


def prepare_emulation(recipe: str, params: dict, quantization: str | None = None) -> EmulationWorkload:
    """The recipe through its frontend steps, once per sweep and granularity (cached).
    `quantization` sets the `weights` option of the recipe's quantize step (tensor, strip
    or channel); None keeps the recipe's steps as they are."""
    from ..identity import canonical_json

    return _prepare(recipe, canonical_json(params or {}), quantization)


@functools.lru_cache(maxsize=8)
def _prepare(recipe: str, params_json: str, quantization: str | None) -> EmulationWorkload:
    from ..errors import InputError
    from ..numerics.run import prepare_recipe

    params = json.loads(params_json)
    prep = prepare_recipe(recipe, params, steps=quantized_steps(recipe, quantization) if quantization else None)
    if prep.failed:  # the recipe's own steps do not hold: no candidate could be checked
        what = "a recipe whose frontend steps pass" + (f" with weights quantized per {quantization}" if quantization else "")
        raise InputError(recipe, "workload.recipe", recipe, f"{what} ({prep.failed})")
    return EmulationWorkload(prep.graph, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind,
                             prep.graph.trace(*prep.inputs))


def quantized_steps(recipe: str, quantization: str):
    """The recipe's frontend steps with the quantize step's weight granularity set."""
    from ..errors import InputError
    from ..frontend.steps import StepSpec, load_steps
    from ..workload import load_recipe

    folder = load_recipe(recipe).path.parent
    steps = load_steps(folder)
    if not any(step.name == "quantize" for step in steps):
        raise InputError(folder, "mapping.quantization", quantization, "a recipe with a quantize step")
    allowed = steps[[step.name for step in steps].index("quantize")].definition.options["weights"][2]
    if quantization not in allowed:
        raise InputError(folder, "mapping.quantization", quantization, ", ".join(allowed))
    return [StepSpec(step.definition, {**step.options, "weights": quantization}) if step.name == "quantize" else step
            for step in steps]


def emulate(work: EmulationWorkload, cand: Candidate) -> dict:
    """One candidate on the emulator: status, reason, metrics (plain data for the driver)."""
    from ..numerics.run import emulate_graph

    rep = emulate_graph(work.graph, cand, work.inputs, work.expected, work.tolerance, work.reference_kind,
                        reference=work.reference)
    if not rep.feasible:
        return dict(status="infeasible", reason=rep.reason, metrics=[], totals={})
    c = rep.counters
    metrics = [
        dict(kind="emulator_cycles", name="latency_cycles", value=float(rep.cycles), unit="cycles"),
        dict(kind="emulator_cycles", name="peak_sram_bytes", value=float(rep.peak_sram_bytes), unit="bytes"),
        dict(kind="emulator_host_time", name="seconds", value=float(rep.seconds), unit="s"),
    ]
    counters = rep.result.counters if rep.result is not None else None
    for core, busy in enumerate(c.get("busy_cycles", [])):
        metrics.append(dict(kind="emulator_cycles", name="busy_cycles", value=float(busy), unit="cycles",
                            scope="core", scope_key=str(core)))
        metrics.append(dict(kind="emulator_cycles", name="waiting_cycles", value=float(rep.cycles - busy),
                            unit="cycles", scope="core", scope_key=str(core)))
        # Waiting by cause: instruction-cycles each instruction waited, attributed to the
        # binding cause (they overlap in time, so they need not add up to waiting_cycles).
        for cause in STALL_CAUSES:
            value = counters.value(f"stall_{cause}_cycles", core=core) if counters is not None else 0
            metrics.append(dict(kind="emulator_cycles", name=f"stall_{cause}", value=float(value),
                                unit="instruction-cycles", scope="core", scope_key=str(core)))
    v = rep.verdict
    if v is not None:
        metrics += [
            dict(kind="numerics", name="passed", value=float(v.passed), unit="bool"),
            dict(kind="numerics", name="integer_bit_exact", value=float(v.integer_bit_exact), unit="bool"),
            dict(kind="numerics", name="max_abs_error", value=float(v.max_abs_error), unit="abs"),
            dict(kind="numerics", name="max_rel_error", value=float(v.max_rel_error), unit="rel"),
        ]
    if v is not None and not v.passed:
        # Results that do not match PyTorch are not evidence of speed: the run fails.
        return dict(status="failed", reason="", metrics=metrics, totals={},
                    error=f"numerics: {v.summary()}")
    return dict(status="ok", reason="", metrics=metrics, totals={"latency_cycles": float(rep.cycles)})


def emulate_safely(work: EmulationWorkload, cand: Candidate) -> dict:
    try:
        return emulate(work, cand)
    except Exception as exc:  # a crash in lowering or emulation is this candidate's failed run
        return dict(status="failed", reason="", metrics=[], totals={}, error=f"{type(exc).__name__}: {exc}",
                    traceback="".join(tb.format_exception(type(exc), exc, exc.__traceback__)))
