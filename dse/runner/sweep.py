"""The sweep driver: spec -> candidates (baseline first) -> stages -> records.

Only this driver writes the store. Every candidate is recorded, infeasible and failed ones
included; a candidate already evaluated (same hash) is never evaluated again, so rerunning
the same command resumes.
"""

from __future__ import annotations

import json
import math
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tqdm import tqdm

from ..analytical import MODEL_VERSION
from ..chips import overridden_data
from ..errors import InputError
from ..mapping import Candidate
from ..records import Store
from ..workload import capture_recipe, load_recipe
from . import samplers
from .acceptance import decide
from .spec import Spec, load_spec
from .stages import analytical_stage, source_count_metrics

FINISHED = {"ok", "infeasible", "pruned", "failed", "crashed"}


@dataclass
class SweepResult:
    experiment_id: int
    name: str
    status: str
    evaluated: int = 0
    resumed: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    decision: str = ""


def _get(data: dict, dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): data}


def diff_from(baseline: dict, other: dict) -> dict[str, list]:
    a, b = _flatten(baseline), _flatten(other)
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


class Sweep:
    def __init__(self, spec: Spec, graph, store: Store, progress: bool = True):
        self.spec, self.graph, self.store, self.progress = spec, graph, store, progress
        recipe = load_recipe(spec.model.workload.recipe)
        m = spec.model
        try:
            self.experiment_id = store.create_experiment(
                name=m.experiment.name, hypothesis=m.experiment.hypothesis,
                acceptance=[c.model_dump() for c in m.acceptance], workload_recipe=recipe.name,
                workload_hash=recipe.source_hash, spec_text=spec.text, spec_hash=spec.hash,
                limitations=m.experiment.limitations, open_questions=m.experiment.open_questions)
        except ValueError as exc:  # the name is taken by another spec: resuming would mix evidence
            raise InputError(spec.path, "experiment.name", m.experiment.name,
                             f"a name this store does not hold for a different spec ({exc})") from None
        self.baseline_data = {"config": spec.baseline_chip.model_dump(mode="json"),
                              "mapping": spec.baseline_mapping.model_dump(mode="json")}
        self.result = SweepResult(self.experiment_id, spec.name, "testing")
        self.best: float | None = None
        self.seen: dict[int, tuple[bool, dict]] = {}  # candidate id -> (feasible, totals) this run

    # -- candidates ------------------------------------------------------------------
    def _build(self, params: dict) -> tuple[dict, dict, Candidate | None, str]:
        """Config and mapping for knob values; an invalid combination is infeasible, not an error."""
        chip_over = {k.target.removeprefix("chip."): params[k.name]
                     for k in self.spec.model.space if k.target.startswith("chip.") and k.name in params}
        try:
            chip, mapping = self.spec.apply(params)
        except InputError as exc:
            config = overridden_data(self.spec.baseline_chip, chip_over, self.spec.path)
            mapping = self.baseline_data["mapping"] | {
                k.target.removeprefix("mapping."): params[k.name]
                for k in self.spec.model.space if k.target.startswith("mapping.") and k.name in params}
            return config, mapping, None, f"invalid chip for this combination: {exc.field}: {exc.allowed}"
        cand = Candidate(chip, mapping)
        return cand.config_dict, cand.mapping_dict, cand, ""

    def evaluate(self, params: dict, origin: str) -> tuple[bool, dict]:
        """Record and evaluate one candidate (or return its recorded result)."""
        config, mapping, cand, invalid = self._build(params)
        cid, _ = self.store.add_candidate(self.experiment_id, config, mapping, origin,
                                          diff_from(self.baseline_data, {"config": config, "mapping": mapping}))
        if origin == "baseline":
            self.store.set_baseline(self.experiment_id, cid)
        if cid in self.seen:  # the grid may propose the baseline again: same hash, same record
            return self.seen[cid]
        done = self._recorded(cid)
        if done is not None:
            self.result.resumed += 1
            self.seen[cid] = done
            return done
        run_id = self.store.start_run(cid, "analytical", seed=self.spec.model.search.seed, model_version=MODEL_VERSION)
        self.result.evaluated += 1
        feasible, totals = False, {}
        try:
            if cand is None:
                self.store.finish_run(run_id, "infeasible", reason=invalid)
            else:
                res = analytical_stage(self.graph, cand)
                metrics = res.metrics() + (source_count_metrics(self.graph) if origin == "baseline" else [])
                self.store.finish_run(run_id, "ok" if res.feasible else "infeasible", metrics,
                                      reason=res.reason or None)
                feasible, totals = res.feasible, res.totals
        except KeyboardInterrupt:
            self.store.finish_run(run_id, "crashed", error="interrupted by the user")
            raise
        except Exception as exc:  # a crash inside a stage is a recorded outcome; the sweep goes on
            self.store.finish_run(run_id, "failed", error=f"{type(exc).__name__}: {exc}",
                                  traceback=traceback.format_exc())
            self._count("failed")
            self.seen[cid] = (False, {})
            return False, {}
        self._count("ok" if feasible else "infeasible")
        self._track_best(feasible, totals)
        self.seen[cid] = (feasible, totals)
        return feasible, totals

    def _recorded(self, cid: int) -> tuple[bool, dict] | None:
        runs = self.store.runs(candidate=cid)
        runs = runs[(runs["stage"] == "analytical") & runs["status"].isin(FINISHED)]
        if runs.empty:
            return None
        status = runs.iloc[-1]["status"]
        self._count(status)
        if status != "ok":
            return False, {}
        m = self.store.metrics(self.experiment_id, kind="analytical")
        m = m[(m["run_id"] == runs.iloc[-1]["id"]) & (m["scope"] == "total")]
        totals = dict(zip(m["name"], m["value"]))
        self._track_best(True, totals)
        return True, totals

    def _count(self, status: str) -> None:
        self.result.counts[status] = self.result.counts.get(status, 0) + 1

    def _track_best(self, feasible: bool, totals: dict) -> None:
        obj = self.spec.model.objectives[0]
        v = totals.get(obj.metric)
        if feasible and v is not None and not math.isnan(v):
            sign = 1 if obj.direction == "minimize" else -1
            if self.best is None or sign * v < sign * self.best:
                self.best = v

    # -- the sweep -------------------------------------------------------------------
    def run(self) -> SweepResult:
        self.store.set_status(self.experiment_id, "testing")
        spec = self.spec
        if samplers.use_grid(spec):
            proposals: Iterable[dict] = samplers.grid(spec)
            total = spec.grid_size()
        else:
            proposals, total = None, spec.model.search.trials
        bar = tqdm(total=total + 1, disable=not self.progress, desc=spec.name, unit="cand", mininterval=0.5)
        try:
            self.evaluate({}, "baseline")
            bar.update()
            if proposals is not None:
                for params in proposals:
                    self.evaluate(params, "grid")
                    self._tick(bar)
            else:
                self._run_tpe(bar)
        finally:
            bar.close()
        verdict = decide(self.store, self.experiment_id, spec)
        self.result.status, self.result.decision = verdict
        return self.result

    def _tick(self, bar) -> None:
        best = f"{self.best:.4g}" if self.best is not None else "-"
        bar.set_postfix(best=best, infeasible=self.result.counts.get("infeasible", 0),
                        failed=self.result.counts.get("failed", 0))
        bar.update()

    def _run_tpe(self, bar) -> None:
        spec = self.spec
        study = samplers.new_study(spec)
        recorded = self._recorded_params()
        samplers.seed_study(study, spec, recorded)
        done = sum(1 for *_, origin in recorded if origin == "sampler")
        bar.update(done)
        dists = samplers.distributions(spec)
        attempts = 0
        # Repeats of an evaluated point are told their recorded values but do not count;
        # the attempt cap ends a sweep whose space is smaller than its trial budget.
        while done < spec.model.search.trials and attempts < 10 * spec.model.search.trials:
            attempts += 1
            trial = study.ask(dists)
            before = self.result.evaluated
            feasible, totals = self.evaluate(trial.params, "sampler")
            trial.set_user_attr("constraint", (0.0 if feasible else 1.0,))
            study.tell(trial, samplers.objective_values(spec, feasible, totals))
            if self.result.evaluated > before:
                done += 1
                self._tick(bar)

    def _recorded_params(self) -> list[tuple[dict, bool, dict, str]]:
        cands = self.store.candidates(self.experiment_id)
        table = self.store.metric_table(self.experiment_id, "analytical")
        totals_by_id = {int(r["candidate_id"]): r for r in table.to_dict("records")}
        out = []
        for c in cands.to_dict("records"):
            data = {"chip": json.loads(c["config"]), "mapping": json.loads(c["mapping"])}
            params = {k.name: _get(data, k.target) for k in self.spec.model.space}
            row = totals_by_id.get(int(c["id"]), {})
            feasible = c["status"] == "ok"
            totals = {k: v for k, v in row.items() if isinstance(v, (int, float))}
            out.append((params, feasible, totals, c["origin"]))
        return out


def run_sweep(spec_path: str | Path, db: str | Path = "records.db", progress: bool = True) -> SweepResult:
    """Validate the spec (nothing is written if it is bad), then sweep into the store."""
    spec = load_spec(spec_path)
    graph = capture_recipe(spec.model.workload.recipe, **spec.model.workload.params)
    with Store(db) as store:
        return Sweep(spec, graph, store, progress).run()
