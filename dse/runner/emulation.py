"""The emulator and numerics stages: the recipe's frontend steps once per sweep, then, per
candidate, lowering + emulation, and the numerics check against PyTorch (`dse.numerics`).

A candidate's emulator run records its evidence under kinds of its own: emulator cycles
and counters (`emulator_cycles`), host time (`emulator_host_time`) and the numerics
verdict (`numerics`); they are never merged with the analytical estimate.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import emulator

from ..errors import InputError
from ..identity import canonical_json
from ..mapping import Candidate, mapping_from_dict
from ..ppa.assess import assess_totals
from ..ppa.energy import METRIC_UNITS, emulator_activity
from ..ppa.holdings import core_chips
from .evidence import Evidence
from .metrics import COUNTER_SCOPES, HOST_PHASE_METRIC, HOST_PHASES


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
    host_time_repeats: int = 1  # how many times the emulator's run is timed (min and median recorded)
    traces: bool = False  # keep the run's timing trace (NDJSON) among its raw evidence
    # chip name -> per-component area and energy factors ({}: uncalibrated; None: no PPA figures)
    ppa_calibration: dict | None = field(default_factory=dict)
    parts: list[str] | None = None  # the model's names of the graph's outputs (each checked on its own)


def prepare_emulation(recipe: str, params: dict, quantization: str | None = None) -> EmulationWorkload:
    """The recipe through its frontend steps, once per sweep and quantize choice (cached).
    `quantization` (`Mapping.quantize_choice`) sets the `weights`, `calibration` and `activations` options
    of the recipe's quantize step; None keeps the recipe's steps as they are."""
    return _prepare(recipe, canonical_json(params or {}), quantization)


@functools.lru_cache(maxsize=8)
def _prepare(recipe: str, params_json: str, quantization: str | None) -> EmulationWorkload:
    from ..frontend.steps import quantized_steps
    from ..numerics.run import prepare_recipe

    params = json.loads(params_json)
    prep = prepare_recipe(recipe, params, steps=quantized_steps(recipe, quantization) if quantization else None)
    if prep.failed:  # the recipe's own steps do not hold: no candidate could be checked
        what = "a recipe whose frontend steps pass" + (f" with quantize options {quantization}" if quantization else "")
        raise InputError(recipe, "workload.recipe", recipe, f"{what} ({prep.failed})")
    return EmulationWorkload(prep.graph, prep.inputs, prep.expected, prep.tolerance, prep.reference_kind,
                             prep.graph.trace(*prep.inputs), parts=prep.parts)


@dataclass
class PlacedEmulation:
    """A staged workload's emulation: every stage prepared (`dse.numerics.run.StageWork`),
    run together as each candidate's mapping.placement places them."""

    stages: list
    host_time_repeats: int = 1
    traces: bool = False
    ppa_calibration: dict | None = field(default_factory=dict)


def prepare_placed(stages) -> PlacedEmulation:
    """`stages`: (role, recipe, params) each; every recipe through its frontend steps once
    (`prepare_emulation`, cached), with its references."""
    from ..numerics.run import StageWork

    out = []
    for role, recipe, params in stages:
        w = prepare_emulation(recipe, params)
        out.append(StageWork(role, w.graph, w.inputs, w.expected, w.tolerance, w.reference_kind, w.reference,
                             w.parts))
    return PlacedEmulation(out)


@dataclass
class Emulated:
    """The emulator stage's result for one candidate: the emulation report (its numerics
    verdict included) and the run's evidence so far."""

    report: Any  # dse.numerics.run.EmulationReport
    evidence: Evidence


def emulate(work: "EmulationWorkload | PlacedEmulation", cand: Candidate) -> Emulated:
    """One candidate lowered and emulated: status, reason, emulator metrics (plain data for
    the driver)."""
    from ..numerics.run import emulate_graph, emulate_placed

    if isinstance(work, PlacedEmulation):
        report = emulate_placed(work.stages, cand)
    else:
        report = emulate_graph(work.graph, cand, work.inputs, work.expected, work.tolerance, work.reference_kind,
                               reference=work.reference, parts=work.parts)
    if not report.feasible:
        return Emulated(report, Evidence("infeasible", report.reason))
    counters = report.counters
    metrics = [
        dict(kind="emulator_cycles", name="latency_cycles", value=float(report.cycles), unit="cycles"),
        dict(kind="emulator_cycles", name="peak_sram_bytes", value=float(report.peak_sram_bytes), unit="bytes"),
        # DRAM traffic and the shared memory (apart from private SRAM) as the emulator counted them
        dict(kind="emulator_cycles", name="dma_bytes", unit="bytes",
             value=float(sum(counters.get("dma_bytes_in", [])) + sum(counters.get("dma_bytes_out", [])))),
        dict(kind="emulator_cycles", name="shared_sram_bytes", value=float(counters.get("shared_bytes_used", 0)),
             unit="bytes"),
        dict(kind="emulator_cycles", name="shared_channel_conflicts", unit="events",
             value=float(sum(counters.get("shared_channel_conflicts", [])))),
        *host_time_metrics(report, cand, work.host_time_repeats),
        *host_phase_metrics(report),
    ]
    emulator_counters = report.result.counters if report.result is not None else None
    if emulator_counters is not None and work.ppa_calibration is not None:  # priced as the analytical stage prices (a figure CACTI cannot give: absent)
        metrics += ppa_metrics(report, cand, work)[0]
    for core, busy in enumerate(counters.get("busy_cycles", [])):
        metrics.append(dict(kind="emulator_cycles", name="busy_cycles", value=float(busy), unit="cycles",
                            scope="core", scope_key=str(core)))
        metrics.append(dict(kind="emulator_cycles", name="waiting_cycles", value=float(report.cycles - busy),
                            unit="cycles", scope="core", scope_key=str(core)))
        # Waiting by cause: instruction-cycles each instruction waited, attributed to the
        # binding cause (they overlap in time, so they need not add up to waiting_cycles).
        for cause in STALL_CAUSES:
            value = emulator_counters.value(f"stall_{cause}_cycles", core=core) if emulator_counters is not None else 0
            metrics.append(dict(kind="emulator_cycles", name=f"stall_{cause}", value=float(value),
                                unit="instruction-cycles", scope="core", scope_key=str(core)))
    if emulator_counters is not None:
        metrics += counter_metrics(emulator_counters)
    return Emulated(report, Evidence("ok", metrics=metrics, totals={"latency_cycles": float(report.cycles)},
                                     artifacts=raw_evidence(report) + (trace_evidence(report, cand) if work.traces else [])))


def emit(work: "EmulationWorkload | PlacedEmulation", cand: Candidate, inputs: dict | None = None):
    """The program `emulate` runs for `cand` (`dse.numerics.emitted.Emitted`), emitted as it
    emits it; on `inputs` (by graph input name, a stage's as ``role/name``: what a run
    stores) in place of the workload's own. Raises `dse.lower.Infeasible`."""
    from ..numerics.emitted import emit_graph, emit_placed, emit_spans

    if isinstance(work, PlacedEmulation):
        return emit_placed([(s.role, s.graph, s.inputs if inputs is None else [inputs[f"{s.role}/{n}"]
                                                                               for n in s.graph.inputs])
                            for s in work.stages], cand)
    given = work.inputs if inputs is None else [inputs[n] for n in work.graph.inputs]
    if cand.mapping.partition == "spans":
        return emit_spans(work.graph, cand, given)
    return emit_graph(work.graph, cand, given)


# Each counter row's key names where: "core 0 matrix" (a Ball of a core), "core 0 bank 3" /
# "tile 0 shared 2" (a bank), "core 0" (a core's DMA engine, its wait for the system bus),
# "system_bus" (the bus itself).
def counter_metrics(counters) -> list[dict]:
    """The run's per-Ball, per-bank, DMA and system-bus counters (`emulator.counters`) as
    metric rows of the emulator's kind, scoped (`COUNTER_SCOPES`), each Ball and bank of
    every core the program ran on (an idle one at 0, so candidates compare row by row)."""
    scope_of = {name: scope for scope, names in COUNTER_SCOPES.items() for name in names}
    rows = []
    for c in counters:
        scope = scope_of.get(c.name)
        if scope is None:
            continue
        where = c.where
        if "channel" in where:
            key = str(where["channel"])
        elif scope == "ball":
            key = f"core {where['core']} {where['ball']}"
        elif scope == "bank":
            key = (f"core {where['core']} bank {where['bank']}" if "core" in where
                   else f"tile {where['tile']} {where['bank']}")
        else:
            key = f"core {where['core']}"
        rows.append(dict(kind="emulator_cycles", name=c.name, value=float(c.value), unit=c.unit, scope=scope,
                         scope_key=key))
    return rows


def host_phase_metrics(report) -> list[dict]:
    """The emulator stage's host time by phase (evidence kind emulator_host_time, scope
    phase): lowering (the plan and the program), the emulator's setup (machine and DRAM
    image), functional pass and timing pass (its counters `host_*_seconds`), the rest of
    its run (collect: outputs read, counters gathered), and the checks against the
    references; they add up to the candidate's `seconds`; host time, never the chip's cycles. A candidate slow
    to emulate says here which phase made it so."""
    counters = report.result.counters if report.result is not None else None
    if counters is None:
        return []
    phases = {"lowering": report.lower_seconds,
              "setup": counters.value("host_setup_seconds"),
              "functional": counters.value("host_functional_seconds"),
              "timing": counters.value("host_timing_seconds")}
    # The rest of the emulator's run: its outputs read and its counters gathered after the passes.
    phases["collect"] = max(0.0, report.emulator_seconds - sum(phases.values()) + report.lower_seconds)
    phases["checks"] = max(0.0, report.seconds - report.lower_seconds - report.emulator_seconds)
    return [dict(kind="emulator_host_time", name=HOST_PHASE_METRIC, value=float(phases[phase]), unit="s",
                  scope="phase", scope_key=phase) for phase in HOST_PHASES]


def ppa_metrics(report, cand: Candidate, work) -> tuple[list[dict], str]:
    """The run's area, energy and power (`run_ppa`) as metric rows of the emulator's kind,
    and why figures are missing ("" when none are)."""
    roles = [s.role for s in work.stages] if isinstance(work, PlacedEmulation) else None
    got = run_ppa(report, cand, n_ops=None if roles else len(work.graph.ops), roles=roles,
                  ppa_calibration=work.ppa_calibration)
    rows = [dict(kind="emulator_cycles", name=name, value=value, unit=METRIC_UNITS[name])
            for name, value in got.totals.items() if value == value]
    rows += [dict(kind="emulator_cycles", name=metric, value=value, unit=METRIC_UNITS[metric], scope="component",
                  scope_key=name) for metric, by in got.components.items() for name, value in by.items()]
    return rows, got.note


def run_ppa(report, cand: Candidate, n_ops: int | None = None, roles: list[str] | None = None,
            ppa_calibration: dict | None = None):
    """An emulator run's area, energy and power (`dse.ppa.assess_totals`, a `PpaResult`):
    its counters' activity (`dse.ppa.energy.emulator_activity`) priced as the analytical
    stage prices its own, on the cores the candidate's placement holds (`n_ops`: one graph's
    op count; `roles`: a staged workload's), its DRAM image as its footprint."""
    counters = report.result.counters
    mapping = mapping_from_dict(report.mapping, "(candidate)")  # the run's: placement "auto" resolved
    cores = core_chips(cand.chip, mapping, n_ops, roles)
    totals = {"latency_cycles": float(report.cycles), **emulator_activity(counters),
              "shared_sram_bytes": float(max((r.value for r in counters.find("shared_bytes_used")), default=0))}
    totals["dma_bytes"] = totals["dram_bytes"]
    (got,) = assess_totals([cand.chip], [cores], [totals], [float(report.result.dram.size)], ppa_calibration or {})
    return got


def host_time_metrics(report, cand: Candidate, repeats: int) -> list[dict]:
    """The emulator's host time, its run timed `repeats` times (the first is the run that
    produced the evidence; the others run the same program again): min and median, the
    count, and the whole candidate's time (lowering, emulation, checks) once."""
    samples = [report.emulator_seconds]
    if report.rerun is not None:
        program, image, mode = report.rerun
        for _ in range(repeats - 1):
            started = time.perf_counter()
            emulator.run(program, cand.chip, image, mode=mode)
            samples.append(time.perf_counter() - started)
    return [
        dict(kind="emulator_host_time", name="seconds", value=float(report.seconds), unit="s"),
        dict(kind="emulator_host_time", name="run_seconds_min", value=float(min(samples)), unit="s"),
        dict(kind="emulator_host_time", name="run_seconds_median", value=float(statistics.median(samples)), unit="s"),
        # the spread of the repeats (max - min), against which a difference is noise (`dse.runner.noise`)
        dict(kind="emulator_host_time", name="run_seconds_max", value=float(max(samples)), unit="s"),
        dict(kind="emulator_host_time", name="runs", value=float(len(samples)), unit="count"),
    ]


def raw_evidence(report) -> list[tuple[str, str, bytes]]:
    """A run's raw evidence, (role, name, bytes) each: every output at the model's shape and
    full precision (one .npy file an output: the same bytes for the same values, so
    bit-exact candidates share the files), the inputs it ran on (what `dse replay` runs
    again), the emulator's counters, the run's log (its report as JSON), its identities
    (`replay.json`: sha256 of the program, the DRAM image it started from and the weights)
    and its bank lifetimes (`banks.json`). The physical buffers the program wrote (padded
    to the matrix Ball's granule) are kept too, labelled as such: ``physical/<name>.padded.npy``."""
    out = []
    result, emitted = report.result, report.emitted
    if result is not None:
        if emitted is not None:
            outputs = emitted.outputs(result.dram)
            for name, value in sorted(outputs.items()):
                out.append(("outputs", f"outputs/{name}.npy", _npy(value)))
            for name, value in emitted.inputs.items():
                out.append(("inputs", f"inputs/{name}.npy", _npy(value)))
            out.append(("log", "replay.json", json.dumps(replay_manifest(report, outputs), sort_keys=True).encode()))
            out.append(("log", "banks.json", json.dumps([life.to_dict() for life in emitted.bank_lifetimes()],
                                                        sort_keys=True).encode()))
        for name, value in sorted(result.outputs.items()):  # the program's own regions: padded buffers
            out.append(("outputs", f"physical/{name}.padded.npy", _npy(value)))
        out.append(("measurements", "counters.json",
                    json.dumps(result.counters.rows(), sort_keys=True, default=str).encode()))
    out.append(("log", "emulation.json", json.dumps(report.to_dict(), sort_keys=True, default=str).encode()))
    return out


def _npy(value) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.asarray(value), allow_pickle=False)
    return buffer.getvalue()


def replay_manifest(report, outputs: dict) -> dict:
    """What `dse replay` checks a rerun against: the run's identities (sha256 of the emitted
    program, of the DRAM image it started from and of the weights), its timing mode, its
    inputs in order and its outputs' shapes, dtypes and sha256."""
    emitted = report.emitted
    digests = emitted.digests()
    if report.rerun is None:  # the run wrote into the image itself: its start is gone
        digests["dram_image_sha256"] = None
    return {"digests": digests, "mode": report.rerun[2] if report.rerun is not None else "overlapped",
            "inputs": list(emitted.inputs),
            "outputs": {name: {"shape": list(np.shape(v)), "dtype": str(np.asarray(v).dtype),
                               "sha256": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()}
                        for name, v in outputs.items()},
            "mapping": emitted.candidate.mapping.model_dump(mode="json", exclude_none=True)}


def trace_evidence(report, cand: Candidate) -> list[tuple[str, str, bytes]]:
    """The run's timing trace, one NDJSON file a kind (itrace, mtrace, pmctrace; see
    `emulator.Trace`), from one more run of the same program with tracing on, so the
    timed runs stay untraced."""
    if report.rerun is None:
        return []
    program, image, mode = report.rerun
    trace = emulator.run(program, cand.chip, image, mode=mode, trace=True).trace
    return [("trace", f"trace/{kind}.ndjson", trace.ndjson(kind).encode()) for kind in ("itrace", "mtrace", "pmctrace")]


def output_metrics(verdict) -> list[dict]:
    """Each graph output's figures (`dse.numerics.OutputCheck`) as numerics rows of scope
    "output", keyed by the model's name of it (logits, k_cache, ...)."""
    rows = []
    for o in verdict.outputs:
        for name, value, unit in (("bit_exact", float(o.bit_exact), "bool"), ("max_abs_error", o.max_abs_error, "abs"),
                                  ("max_rel_error", o.max_rel_error, "rel"), ("tolerance", o.tolerance, "rel"),
                                  ("within_tolerance", float(o.within_tolerance), "bool")):
            rows.append(dict(kind="numerics", name=name, value=float(value), unit=unit, scope="output",
                             scope_key=o.part))
    return rows


def judge_numerics(emulated: Emulated) -> Evidence:
    """The numerics verdict's metrics added to the run's evidence; a run whose outputs do not
    match PyTorch fails."""
    evidence, verdict = emulated.evidence, emulated.report.verdict
    if evidence.status != "ok" or verdict is None:
        return evidence
    metrics = evidence.metrics + [
        dict(kind="numerics", name="passed", value=float(verdict.passed), unit="bool"),
        dict(kind="numerics", name="integer_bit_exact", value=float(verdict.integer_bit_exact), unit="bool"),
        dict(kind="numerics", name="max_abs_error", value=float(verdict.max_abs_error), unit="abs"),
        dict(kind="numerics", name="max_rel_error", value=float(verdict.max_rel_error), unit="rel"),
        *output_metrics(verdict),
    ]
    if not verdict.passed:
        # Results that do not match PyTorch are not evidence of speed: the run fails.
        return Evidence("failed", metrics=metrics, error=f"numerics: {verdict.summary()}",
                        artifacts=evidence.artifacts)
    return Evidence("ok", metrics=metrics, totals=evidence.totals, artifacts=evidence.artifacts)
