"""What the stages of the chain (`dse.runner.chain`) compute, and the plain data they pass:
typed inputs, results out, no knowledge of samplers or storage."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..analytical.estimate import estimate_columns, spmd_chips, summarize_columns
from ..analytical.moe import estimate_spread
from ..errors import InputError
from ..frontend import run_pipeline
from ..identity import canonical_json
from ..mapping import Candidate
from ..mapping.params import CandidateArrays
from ..plan.graph_plan import dram_footprint, plan_key
from ..plan.moe import spreads
from ..ppa.assess import assess_candidates, assess_frame
from ..ppa.names import COMPONENTS
from ..ppa.energy import METRIC_UNITS
from ..records import MetricRow
from ..records.checks import MetricColumns
from ..units.scan import scan_notes
from .emulation import prepare_emulation
from .evidence import Evidence, Outcome  # noqa: F401  (read from here too)
from .spec import METRICS

UNITS = {
    "latency_cycles": "cycles", "compute_cycles": "cycles", "dma_cycles": "cycles",
    "core_cycles": "cycles", "dma_bytes": "bytes", "peak_sram_bytes": "bytes", "shared_sram_bytes": "bytes",
    "private_sram_bytes": "bytes", "private_sram_per_core_bytes": "bytes", "unaddressable_sram_bytes": "bytes",
    **METRIC_UNITS,
    # a mixture of experts: the busiest worker's (expert's) routed tokens over the mean
    "core_imbalance": "ratio", "expert_imbalance": "ratio",
}


OP_FIELDS = ("op", "unit", "cycles", "tile_m", "tile_n", "tile_k", "energy_uj")


@dataclass
class Workload:
    """What the evaluation stages need besides the candidates (the frontend stage's output):
    the analytical graph and, when the emulator stage runs, the prepared emulation workloads."""

    graph: object  # the analytical stage's graph for candidates that leave quantization unset
    emulation: object | None = None
    # One prepared emulation workload per quantization granularity a sweep's candidates set
    # (mapping.quantization); `emulation` serves the candidates that leave it unset.
    emulations: dict = field(default_factory=dict)
    recipe: str | None = None  # what to prepare a granularity not prepared up front from
    params: dict = field(default_factory=dict)
    # The analytical graph per quantization granularity (the recipe's steps with it set).
    graphs: dict = field(default_factory=dict)
    # The newest calibration of each chip name the sweep uses ({} : uncalibrated model).
    calibration: dict = field(default_factory=dict)
    # The newest area / energy calibration of each chip name: component -> factors ({}: none;
    # None: no area, energy or power at all, the spec's ``[stages] ppa = false``).
    ppa_calibration: dict | None = field(default_factory=dict)
    host_time_repeats: int = 1  # the spec's [stages] host_time_repeats, for the emulation workloads
    traces: bool = False  # the spec's [stages] traces: keep each emulator run's timing trace
    # A staged workload (the spec's workload.stages): (role, analytical graph) of every stage,
    # the workload's own first, and their emulation (`emulation.PlacedEmulation`); every
    # candidate runs all of them, placed as its mapping.placement says.
    stages: list = field(default_factory=list)
    placed_emulation: object | None = None
    # The stages a worker runs per run stage (`chain.evaluation` of the sweep's chain);
    # None: those of `chain.CHAIN`.
    evaluation: dict | None = None
    # The spec's MoE routing and capacity factor (`dse.analytical.moe.routed`); None: the
    # recorded routing, no capacity.
    routing: tuple | None = None

    def _point(self, point: dict | None) -> tuple[str | None, dict]:
        point = dict(point or {})
        return point.pop("recipe", self.recipe), {**self.params, **point}

    def graph_for(self, quantization: str | None, point: dict | None = None):
        """The analytical graph of a granularity and workload point (a candidate's
        mapping.workload; None: the experiment's own workload)."""
        if point:
            recipe, params = self._point(point)
            return analytical_graph(recipe, params, quantization)  # made on first use, cached
        if quantization is None:
            return self.graph
        if quantization not in self.graphs:  # the frontend stage, on this granularity's first use
            if self.recipe is None:
                raise RuntimeError(f"no analytical graph for quantization {quantization!r}")
            self.graphs[quantization] = analytical_graph(self.recipe, self.params, quantization)
        return self.graphs[quantization]

    def emulation_for(self, quantization: str | None, point: dict | None = None):
        if self.stages:
            emulation = self.placed_emulation
            if emulation is None:
                raise RuntimeError("no emulation workload prepared for the workload's stages")
            emulation.host_time_repeats, emulation.traces = self.host_time_repeats, self.traces
            emulation.ppa_calibration = self.ppa_calibration
            return emulation
        if point:
            recipe, params = self._point(point)
            emulation = prepare_emulation(recipe, params, quantization)
        else:
            emulation = self._emulation_for(quantization)
        if emulation is not None:
            emulation.host_time_repeats = self.host_time_repeats
            emulation.traces = self.traces
            emulation.ppa_calibration = self.ppa_calibration
        return emulation

    def _emulation_for(self, quantization: str | None):
        if quantization is None:
            return self.emulation
        if quantization not in self.emulations:  # not prepared up front: prepared here, once per process

            if self.recipe is None:
                raise RuntimeError(f"no emulation workload prepared for quantization {quantization!r}")
            self.emulations[quantization] = prepare_emulation(self.recipe, self.params, quantization)
        return self.emulations[quantization]


@dataclass
class AnalyticalResult:
    feasible: bool
    reason: str
    totals: dict[str, float]
    ops: list[tuple] = field(repr=False)  # per op: OP_FIELDS
    notes: str = ""  # the placement "auto" picked, how tensors went between ranges (candidate notes)
    components: Mapping = field(default_factory=dict)  # area and energy by component (`PpaResult.components`)
    # `metrics()` as a batch made it for every candidate at once (`_batch_results`), else None
    columns: MetricColumns | None = field(default=None, repr=False)

    def metrics(self) -> MetricColumns:
        """Metric columns (`MetricColumns`, read as MetricRows): totals, area and energy by
        component (scope component), then per-op cycles and tiles (scope op), all of kind
        'analytical'."""
        if self.columns is not None:  # a fresh object a call: a caller may append to it
            return MetricColumns(self.columns.shape, self.columns.values)
        # Tens of metrics a candidate, thousands a batch: the values gathered in order, and
        # the shape they fill looked up by what decides it (which totals and components are
        # set, each op's unit and whether its energy is), made once per distinct shape. NaN
        # told by `v == v` (pd.notna's per-call cost shows here).
        totals = tuple(name for name, value in self.totals.items() if value is not None and value == value)
        values = [float(self.totals[name]) for name in totals]
        components = []
        for metric, by in self.components.items():
            for name, value in by.items():
                if value == value:
                    components.append((metric, name))
                    values.append(float(value))
        ops = []
        if self.feasible:
            for op, unit, cycles, tm, tn, tk, energy in (o if len(o) == 7 else (*o, None) for o in self.ops):
                values.append(float(cycles))
                costed = energy is not None and energy == energy
                if costed:
                    values.append(float(energy))
                matrix = unit == "matrix"
                if matrix:
                    values += (float(tm), float(tn), float(tk))
                ops.append((op, costed, matrix))
        return MetricColumns(shape_of((totals, tuple(components), tuple(ops))), values)


_SHAPES: dict[tuple, tuple] = {}  # the shapes of `AnalyticalResult.metrics`, by what decides each


def shape_of(key: tuple) -> tuple:
    """`_shape` of (totals, components, ops), made once per distinct key."""
    shape = _SHAPES.get(key)
    if shape is None:
        if len(_SHAPES) >= 256:
            _SHAPES.clear()
        shape = _SHAPES[key] = _shape(*key)
    return shape


def _shape(totals: tuple, components: tuple, ops: tuple) -> tuple:
    """The columns (kinds, names, units, scopes, scope_keys) of an analytical result's
    metrics: `totals` by name, `components` (metric, component) each, `ops` (op, energy
    costed, matrix) each."""
    rows = [(name, UNITS[name], "total", "") for name in totals]
    rows += [(metric, UNITS[metric], "component", name) for metric, name in components]
    for op, costed, matrix in ops:
        rows.append(("cycles", "cycles", "op", op))
        if costed:
            rows.append(("energy_uj", "uJ", "op", op))
        if matrix:
            rows += [("tile_m", "elements", "op", op), ("tile_n", "elements", "op", op),
                     ("tile_k", "elements", "op", op)]
    names, units, scopes, keys = (tuple(column) for column in zip(*rows)) if rows else ((),) * 4
    return ("analytical",) * len(rows), names, units, scopes, keys


def total_metrics(row) -> dict[str, float]:
    return {m: float(row.get(m, float("nan"))) for m in METRICS}


def add_ppa(rows: list[dict], cands: list[Candidate], footprints, ppa_calibration=None, n_ops: int | None = None,
            roles: list[str] | None = None, per_op=None) -> tuple[list[dict], list[str]]:
    """`dse.ppa.assess.assess_candidates`; none of it with ``[stages] ppa = false``
    (`ppa_calibration` None)."""
    if ppa_calibration is None:
        return [{} for _ in rows], ["" for _ in rows]

    return assess_candidates(rows, cands, footprints, ppa_calibration, n_ops, roles, per_op)


def _footprints(graph, cands: list[Candidate]) -> list[float]:
    """Each candidate's DRAM footprint (`dram_footprint`), read once per distinct mapping."""
    of: dict[int, float] = {}
    out = []
    for c in cands:
        found = of.get(id(c.mapping))
        if found is None:
            found = of[id(c.mapping)] = float(dram_footprint(graph, *plan_key(c.mapping), c.mapping.requests or 1))
        out.append(found)
    return out


def analytical_graph(recipe: str, params: dict, quantization: str | None = None):
    """The graph the analytical stage costs: the recipe after its frontend steps (with the
    quantize step's weight granularity set, when given) - the very graph the lowering and
    the emulator run, so the model's int8 products, Ball streams and core ops are theirs.
    The per-stage PyTorch checks are skipped (the emulator stage's preparation runs them)."""
    return _analytical_graph(recipe, canonical_json(params or {}), quantization)


@functools.lru_cache(maxsize=8)
def _analytical_graph(recipe: str, params_json: str, quantization: str | None):
    from ..frontend.steps import quantized_steps

    steps = quantized_steps(recipe, quantization) if quantization else None
    pipe = run_pipeline(recipe, json.loads(params_json), steps=steps, check=False)
    if not pipe.passed:
        failed = next(s for s in pipe.stages if not s.passed)
        raise InputError(recipe, "workload.recipe", recipe,
                         f"a recipe whose frontend steps apply ({failed.name}: {failed.error})")
    # The numbered dumps (capture, then each step) as text, kept for the record: cheap
    # beside the capture, and the graphs they come from need not stay alive.
    _DUMPS[(recipe, params_json, quantization)] = [(stage.dump, graph.dump())
                                                   for stage, graph in zip(pipe.stages, pipe.graphs)]
    return pipe.graph


_DUMPS: dict[tuple, list[tuple[str, str]]] = {}


def frontend_dumps(recipe: str, params: dict, quantization: str | None = None) -> list[tuple[str, str]]:
    """The numbered dumps of the analytical graph's frontend stages, (file name, text) each
    ("01-import.txt", "02-permute.txt", ...), as this process made them."""
    analytical_graph(recipe, params, quantization)
    return _DUMPS.get((recipe, canonical_json(params or {}), quantization), [])


def frontend_workload(recipe: str, params: dict, emulated=()) -> Workload:
    """The analytical graph of candidates that leave quantization unset (the recipe's steps as
    they are; the baseline's own granularity, when it sets one, is another graph), and an
    emulation workload per granularity in `emulated` (None: the recipe's own), prepared here
    once rather than in every worker."""
    work = Workload(analytical_graph(recipe, params), recipe=recipe, params=params)
    if emulated:
        for quantization in emulated:
            if quantization is None:
                work.emulation = prepare_emulation(recipe, params)
            else:
                work.emulations[quantization] = prepare_emulation(recipe, params, quantization)
    return work


def analytical_batch(graph, cands: list[Candidate], calibration: dict | None = None,
                     ppa_calibration: dict | None = None) -> list[AnalyticalResult]:
    """The analytical stage for many candidates at once (one vectorised estimate);
    `calibration` maps chip names to fitted constants (`dse.analytical.calibration`),
    `ppa_calibration` chip names to per-component area and energy factors."""
    if not cands:
        return []
    placed, rest = _split_by_mapping(cands, laid_out)
    if placed:  # one graph in ranges on core groups (or the model's pick): `placed_graph_batch`
        out: list = [None] * len(cands)
        for i, r in zip(placed, placed_graph_batch(graph, [cands[i] for i in placed], calibration, ppa_calibration)):
            out[i] = r
        for i, r in zip(rest, analytical_batch(graph, [cands[i] for i in rest], calibration, ppa_calibration)):
            out[i] = r
        return out
    spread, rest = _split_by_mapping(cands, spreads)
    if spread and len(spread) < len(cands):  # the experts spread over the workers: `estimate_spread`
        out = [None] * len(cands)
        for part in (spread, rest):
            for i, r in zip(part, analytical_batch(graph, [cands[i] for i in part], calibration, ppa_calibration)):
                out[i] = r
        return out
    if not spread:  # columns throughout: no frame for thousands of candidates x ops
        spmd = spmd_chips(cands)  # read by both
        per_op = estimate_columns(graph, cands, calibration, spmd=spmd)
        return _batch_results(graph, cands, per_op, summarize_columns(per_op, cands, spmd), ppa_calibration)
    # the experts spread over the workers: every candidate every op too, as columns, with
    # the busiest worker's imbalance where feasible
    per_op, totals, imbalances = estimate_spread(graph, cands, calibration)
    imbalance = np.where(np.asarray(totals["feasible"], dtype=bool), np.asarray(imbalances, dtype=np.float64), np.nan)
    return _batch_results(graph, cands, per_op, totals, ppa_calibration, {"core_imbalance": imbalance})


def _split_by_mapping(cands: list[Candidate], test) -> tuple[list[int], list[int]]:
    """The positions of the candidates whose mapping passes `test`, and of the others
    (`test` asked once per distinct mapping object: a batch's candidates share a few)."""
    said: dict[int, bool] = {}
    yes, no = [], []
    for i, c in enumerate(cands):
        passed = said.get(id(c.mapping))
        if passed is None:
            passed = said[id(c.mapping)] = bool(test(c.mapping))
        (yes if passed else no).append(i)
    return yes, no


def _batch_results(graph, cands: list[Candidate], per_op, totals, ppa_calibration: dict | None,
                   extra: dict[str, np.ndarray] | None = None) -> list[AnalyticalResult]:
    """`analytical_batch`'s results from the SPMD estimate (`per_op`: `estimate_columns`,
    candidate-major, every candidate every op) and its totals (`summarize_columns`), made as
    columns: the PPA figures
    (`dse.ppa.assess.assess_frame`), each candidate's totals, and its metric columns,
    grouped by which metrics it has (what `AnalyticalResult.metrics` gives one candidate).
    `per_op` and `totals`: columns or frames; `extra`: totals beyond `METRICS` (name ->
    per-candidate values), after them, a feasible candidate's only."""
    n, n_ops = len(cands), len(graph.ops)
    ppa = None
    if ppa_calibration is not None:
        ppa = assess_frame(totals, cands, _footprints(graph, cands), ppa_calibration, per_op=per_op)
    notes, scans = list(ppa.notes) if ppa else [""] * n, _scan_notes(graph, cands)
    if any(scans):  # (a graph with scans only: the PPA note, then the scan's)
        notes = ["; ".join(filter(None, [n, s])) for n, s in zip(notes, scans)]
    feasible = np.asarray(totals["feasible"], dtype=bool)
    reasons = [str(r) for r in totals["reason"].tolist()]
    extra = extra or {}
    total_names = METRICS + tuple(extra)
    figures = np.full((n, len(total_names)), np.nan)
    for j, name in enumerate(METRICS):
        if ppa is not None and name in ppa.totals:
            figures[:, j] = ppa.totals[name]
        elif name in totals:
            figures[:, j] = np.asarray(totals[name], dtype=np.float64)
    for j, values in enumerate(extra.values(), len(METRICS)):
        figures[:, j] = np.where(feasible, np.asarray(values, dtype=np.float64), np.nan)
    # The metric columns: every candidate's values laid out alike (totals, area and energy by
    # component, per op cycles, energy and tiles), with which of them it has.
    blocks, present = [figures], [~np.isnan(figures)]
    components: list[tuple[str, str]] = []
    if ppa is not None:
        kept = ppa.kept()
        for metric, by in (("area_mm2", ppa.area_by), ("energy_uj", ppa.energy_by)):
            blocks.append(by)
            present.append(kept & ~np.isnan(by))
            components += [(metric, name) for name in COMPONENTS]
    op_columns = {c: np.asarray(per_op[c]) for c in OP_FIELDS if c in per_op}
    if n_ops:
        grid = lambda c: op_columns[c].reshape(n, n_ops).astype(np.float64)  # noqa: E731  (candidates x ops)
        energy = grid("energy_uj") if "energy_uj" in op_columns else np.full((n, n_ops), np.nan)
        matrix = (op_columns["unit"] == "matrix").reshape(n, n_ops)
        on = np.broadcast_to(feasible[:, None], (n, n_ops))
        blocks.append(np.stack([grid("cycles"), energy, grid("tile_m"), grid("tile_n"), grid("tile_k")],
                               axis=2).reshape(n, -1))
        present.append(np.stack([on, on & ~np.isnan(energy), on & matrix, on & matrix, on & matrix],
                                axis=2).reshape(n, -1))
    values, present = np.concatenate(blocks, axis=1), np.concatenate(present, axis=1)
    patterns, first, which = np.unique(np.packbits(present, axis=1), axis=0, return_index=True, return_inverse=True)
    which = which.reshape(-1)
    columns: list = [None] * n
    names = [op.name for op in graph.ops]
    n_totals, n_components = len(total_names), len(components)
    for k in range(len(patterns)):
        mask = present[first[k]]
        rows = np.flatnonzero(which == k)
        ops = ()
        if n_ops and feasible[first[k]]:
            op_mask = mask[n_totals + n_components:].reshape(n_ops, 5)
            ops = tuple((name, bool(m[1]), bool(m[2])) for name, m in zip(names, op_mask))
        shape = shape_of((tuple(name for name, on in zip(total_names, mask[:n_totals]) if on),
                          tuple(c for c, on in zip(components, mask[n_totals:n_totals + n_components]) if on), ops))
        for row, got in zip(rows.tolist(), values[rows][:, mask].tolist()):
            columns[row] = MetricColumns(shape, got)
    op_rows = [np.asarray(per_op[c]) if c in per_op else None for c in OP_FIELDS]  # `_OpRows` of each
    parts = [_Components(ppa, i) if ppa is not None else {} for i in range(n)]
    out = [AnalyticalResult(f, reason, dict(zip(METRICS, t)), _OpRows(op_rows, start, start + n_ops), note, part,
                            column)
           for f, reason, t, note, part, column, start in zip(feasible.tolist(), reasons, figures.tolist(), notes,
                                                               parts, columns, range(0, n * n_ops, n_ops))]
    for j, name in enumerate(extra, len(METRICS)):  # a feasible candidate's, after the others
        for result, value in zip(out, figures[:, j].tolist()):
            if result.feasible:
                result.totals[name] = value
    return out


class _OpRows(Sequence):
    """One candidate's per-op rows (`OP_FIELDS` tuples) of a batch's per-op frame, made
    when read (`AnalyticalResult.ops`)."""

    __slots__ = ("columns", "start", "stop")

    def __init__(self, columns: list, start: int, stop: int):
        self.columns, self.start, self.stop = columns, start, stop

    def _rows(self) -> list[tuple]:
        n = self.stop - self.start
        return list(zip(*(c[self.start:self.stop].tolist() if c is not None else [None] * n for c in self.columns)))

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index):
        return self._rows()[index]

    def __iter__(self):
        return iter(self._rows())


class _Components(Mapping):
    """One candidate's area and energy by component (`PpaColumns.components`), made when read."""

    __slots__ = ("ppa", "index", "_made")

    def __init__(self, ppa, index: int):
        self.ppa, self.index, self._made = ppa, index, None

    def _dict(self) -> dict:
        if self._made is None:
            self._made = self.ppa.components(self.index)
        return self._made

    def __getitem__(self, key):
        return self._dict()[key]

    def __iter__(self):
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())


def placed_graph_batch(graph, cands: list[Candidate], calibration: dict | None = None,
                       ppa_calibration: dict | None = None) -> list[AnalyticalResult]:
    """The analytical stage of candidates placing one graph on core groups (``mapping.placement
    = "layers"``, `dse.analytical.placed.estimate_layers`), or letting the model pick
    (``"auto"``: `resolve_auto`, named in the notes); per-op rows as `analytical_batch`'s."""
    from ..analytical.placed import estimate_layers, resolve_auto

    picked = [Candidate(c.chip, resolve_auto(graph, c)) if c.mapping.placement == "auto" else c
              for c in cands]
    layered = [i for i, c in enumerate(picked) if laid_out(c.mapping)]
    out: list = [None] * len(cands)
    at_layers = set(layered)
    for i, r in zip([i for i in range(len(cands)) if i not in at_layers],
                    analytical_batch(graph, [c for c in picked if not laid_out(c.mapping)], calibration,
                                     ppa_calibration)):
        out[i] = r
    if layered:
        totals, per_op, notes = estimate_layers(graph, [picked[i] for i in layered], calibration)
        rows = totals.to_dict("records")
        costed = [picked[i] for i in layered]
        components, said = add_ppa(rows, costed, _footprints(graph, costed), ppa_calibration, n_ops=len(graph.ops),
                                   per_op=per_op)
        ops: dict[int, list[tuple]] = {}
        if not per_op.empty:
            if "energy_uj" not in per_op:
                per_op["energy_uj"] = np.nan
            for cand, *row in zip(per_op["candidate"].tolist(), *[per_op[c].tolist() for c in OP_FIELDS]):
                ops.setdefault(cand, []).append(tuple(row))  # energy_uj: NaN where not assessed
        scans = _scan_notes(graph, costed)
        for k, (i, t) in enumerate(zip(layered, rows)):
            out[i] = AnalyticalResult(bool(t["feasible"]), str(t["reason"]), total_metrics(t), ops.get(k, []),
                                      "; ".join(filter(None, [notes[k], said[k], scans[k]])), components[k])
    for i, (c, p) in enumerate(zip(cands, picked)):
        if c.mapping.placement == "auto":
            out[i].notes = "; ".join(filter(None, [f"placement auto picked {pick_text(p.mapping)}", out[i].notes]))
    return out


def _scan_notes(graph, cands: list[Candidate]) -> list[str]:
    """Per candidate, where each scan's weight and state live and why (`dse.plan.scan.scan_notes`)."""
    if not any(op.kind == "scan" for op in graph.ops):
        return [""] * len(cands)
    return scan_notes(graph, CandidateArrays.from_candidates(cands))


def laid_out(mapping) -> bool:
    """Whether a one-graph candidate runs as a `dse.plan.placement.schedule` (ranges on core
    groups, several requests) or the model picks its placement, rather than plain SPMD."""
    return mapping.placement in ("layers", "pipeline", "auto") or (mapping.requests or 1) > 1


def pick_text(mapping) -> str:
    """The placement a mapping states, in the words of its knobs."""
    if mapping.placement in ("layers", "pipeline"):
        return f"{mapping.placement}, cuts = {list(mapping.cuts)}"
    return mapping.placement or "spmd"


def placed_batch(stages, cands: list[Candidate], calibration: dict | None = None,
                 ppa_calibration: dict | None = None) -> list[AnalyticalResult]:
    """The analytical stage of a staged workload (`stages`: (role, graph) each) for many
    candidates: every stage costed on its place (`dse.analytical.placed.estimate_placed`);
    per-op rows named ``role:op``."""
    from ..analytical.placed import estimate_placed

    if not cands:
        return []
    totals, per_stage = estimate_placed(stages, cands, calibration)
    ops: dict[int, list[tuple]] = {}
    for (role, _), frame in zip(stages, per_stage):
        if frame.empty:
            continue
        if "energy_uj" not in frame:  # per-op energy of stages placed together: not assessed op by op
            frame["energy_uj"] = np.nan
        columns = [frame[c].tolist() for c in OP_FIELDS]
        for cand, *row in zip(frame["candidate"].tolist(), *columns):
            ops.setdefault(cand, []).append((f"{role}:{row[0]}", *row[1:]))
    from ..analytical.placed import bound_across_stages, resolve_auto_stages

    resolved = [Candidate(c.chip, resolve_auto_stages(stages, c)) if c.mapping.placement == "auto" else c
                for c in cands]
    notes = [f"placement auto picked {pick_text(r.mapping)}" if c.mapping.placement == "auto" else ""
             for c, r in zip(cands, resolved)]
    rows = totals.to_dict("records")
    # the stages' identical weights placed once (`dse.plan.memory.Dram.bind_content`)
    footprint = float(sum(_footprints(graph, resolved[:1])[0] for _, graph in stages)
                      - bound_across_stages([g for _, g in stages], *plan_key(resolved[0].mapping)))
    components, said = add_ppa(rows, resolved, [footprint] * len(cands), ppa_calibration,
                               roles=[role for role, _ in stages])
    return [AnalyticalResult(bool(t["feasible"]), str(t["reason"]), total_metrics(t), ops.get(i, []),
                             "; ".join(filter(None, [notes[i], said[i]])), components[i])
            for i, t in enumerate(rows)]


def source_count_metrics(graph) -> list[MetricRow]:
    """Counts derived from the source graph: the same for every candidate."""
    t = graph.totals()
    return [
        MetricRow("source_counts", "macs", float(t.macs), "ops"),
        MetricRow("source_counts", "other_ops", float(t.other_ops), "ops"),
        MetricRow("source_counts", "bytes_read", float(t.bytes_read), "bytes"),
        MetricRow("source_counts", "bytes_written", float(t.bytes_written), "bytes"),
        MetricRow("source_counts", "weight_bytes", float(t.weight_bytes), "bytes"),
    ]
