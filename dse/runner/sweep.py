"""The sweep driver: spec -> candidates (baseline first) -> the stage chain -> records.

The stages are declared, in order, in `dse.runner.chain` (CHAIN); this driver runs them in
that order (`sweep_into_store` the SETUP ones, `Sweep._drive` the rest, each on the output
of the one before), proposes candidates, batches them and writes what the stages return.

Only this driver writes the store. Candidates are proposed, evaluated and recorded in
batches: a batch is evaluated by the analytical stage, then every candidate of it is
recorded (infeasible and failed ones included) with its run already finished, in one
transaction; a batch cut by an interrupt or a crash before that write is not recorded at
all. Runs of the emulator stage are written *running* before their work and finished
after, so a driver killed meanwhile leaves them visible (crashed, once its death is seen).
A candidate already evaluated (same hash) is never evaluated again, so rerunning the same
command resumes, the sampler rebuilt from the records: the batch that was not recorded,
and any run left unfinished by a killed driver, are evaluated again. Nor is a candidate an
earlier experiment on the same workload evaluated under the same versions and settings
(dse.records.reuse): its run of the stage
links to that evidence instead (`reuse=False`, `dse sweep --no-reuse`: evaluated afresh). (A rerun with nothing left to do does not get here:
`dse.runner.run_sweep` answers it from the records, `dse.runner.rerun`.)
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import signal
import threading
import time
import tomllib
from pathlib import Path

import emulator
from emulator.chip import chip_from_dict

from ..analytical import MODEL_VERSION
from ..chips import capacity_notes
from ..errors import InputError
from ..identity import Encoded, canonical_json
from ..records import Store
from ..records.calibrations import ppa_factors, ppa_version
from ..records.opening import checked_url
from ..records.schema import utcnow
from ..workload.moe import moe_layers, parse_routing
from .acceptance import propose
from .candidates import BuiltCandidate, CandidateBuilder
from .chain import ANALYTICAL, CAPTURE, CHAIN, EMULATOR, FRONTEND, PLAN, PRUNE, RECORD, SETUP, Stage, evaluation
from .cluster import CONNECT_TIMEOUT_S
from .emulation import prepare_placed
from .execution import InlineExecutor, PoolExecutor, WorkItem, make_executor, remember_chip
from .limits import capture_limit, time_limit  # noqa: F401  (time_limit: the tests' name for it)
from .progress import finish, make_bar, planned, set_total
from .propose import record_experiment, resolve_links
from .recorder import Recorder
from .result import DONE, IDLE_ROUNDS, SweepResult
from .samplers import Observation, Proposal, Sampler, batch_size, make_sampler, sampler_kind
from .spec import ACTIVATION_SCALES_TARGET, CALIBRATION_TARGET, QUANTIZATION_TARGET, Spec, Stages
from .stages import Outcome, analytical_graph, frontend_dumps, source_count_metrics

# A local pool evaluates an analytical batch only when the driver would spend longer than
# this on it (see Sweep._analytical_executor); 0: the pool always does.
POOL_ANALYTICAL_MIN_SECONDS = 2.0
# Test hook: the driver stops itself (SIGSTOP) once this many analytical batches are
# evaluated, the last of them not recorded yet: a stand-in for a pause at an unlucky moment
# (a suspended laptop, a ^Z, a VM migrated), from which a SIGCONT wakes it.
STOP_ENV = "DSE_TEST_STOP_AFTER_BATCHES"
ASK_ROUNDS = 10  # a batch's rounds of asking again for proposals of candidates already evaluated
SETUP_NAMES = frozenset(s.name for s in SETUP)  # the stages `sweep_into_store` runs, before the driver's


@contextlib.contextmanager
def _collection_paused(freeze: bool = False):
    """The cyclic garbage collector paused, then as it was: an analytical batch's thousands
    of objects (candidates, outcomes, rows) live until the batch is recorded, so collections
    while they are made find next to nothing, and cost a grid sweep of 2,320 candidates about
    4% of its CPU (100 young and 10 middle generation passes, each over more of them).
    `freeze`: what the paused work left alive (the candidates known, their chips) is then
    moved out of the collector's passes too (`gc.freeze`, the sweep's own, undone when it
    ends), not scanned by the next young pass and the middle generation's after it (with
    the ask paused too, the 2,320 grid's collections: 10.2 ms -> 1.3 ms; they freed 5 objects)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if freeze:
                gc.freeze()
            gc.enable()


class Sweep:
    def __init__(self, spec: Spec, captured_graph, store: Store, executor=None, progress: bool = True,
                 model_version: str = MODEL_VERSION, reuse: bool = True, chain: tuple[Stage, ...] = CHAIN):
        # `captured_graph`: the capture stage's graph, for the source-derived counts; the
        # analytical stage costs the graph after the recipe's steps (the executor's workload).
        self.spec, self.captured_graph, self.progress = spec, captured_graph, progress
        self.model_version = model_version
        self.reuse = reuse
        self.chain = chain  # the stages this driver runs after SETUP, in this order (`_drive`)
        self.executor = executor or make_executor(captured_graph)
        self.recorder = Recorder(store)
        links = resolve_links(spec, store)
        self.experiment_id = record_experiment(store, spec, links, "rename the experiment to record the changed "
                                               "spec (or revert the edit to resume)", status="testing")
        self.store = store
        self.workload_hash = store.experiment(self.experiment_id)["workload_hash"]
        self._settings_of: dict[str, dict] = {}  # an earlier spec's result-affecting settings, by its text
        self.result = SweepResult(self.experiment_id, spec.name, "testing")
        self.best_objective: float | None = None  # the best feasible value of the first objective
        self.known: dict[str, tuple[int, Observation]] = {}  # candidates done, by hash: (candidate id, outcome)
        self.builder = CandidateBuilder(spec, on_chip=remember_chip)
        self.baseline_data = self.builder.baseline_data
        self._notes: dict[str, str] = {}  # a chip's capacity notes, by its canonical JSON
        self.stop_requested = False
        self._inline_executor = InlineExecutor(self.executor.work) if isinstance(self.executor, PoolExecutor) else None
        self._inline_seconds_per_candidate: float | None = None  # measured on the driver's batches
        self._sampler_seconds = 0.0
        self._idle_rounds = 0  # asks in a row that proposed only candidates already evaluated
        self._evidence_bytes: int | None = None  # the evidence folder's size, read when first needed
        # Candidates the progress bar has counted in this run: a slot (baseline, hand
        # candidate, grid point) proposing one of them again takes itself off the total.
        self._counted: set[str] = set()
        self._exhaustive = False
        self._sampler: Sampler | None = None  # made in `_run`, from the records; asked in `_analytical_step`
        self._batches = 0  # recorded (for the STOP_ENV test hook)
        self._stop_after = int(os.environ.get(STOP_ENV) or 0)
        self._diff_parts: dict[tuple[str, str], str] = {}  # (section, its canonical JSON) -> its part of `_diff`
        self._ahead: dict[str, Outcome] = {}  # outcomes evaluated with an earlier batch, by hash (`_evaluate`)
        self._freezing = False  # the sweep froze the heap it started with (`_run_locked`): it may freeze more

    # -- building candidates ---------------------------------------------------------
    def _build(self, params: dict) -> BuiltCandidate:
        return self.builder.build(params)

    def _notes_of(self, b: BuiltCandidate) -> str:
        """What the candidate's record says beyond its metrics (`capacity_notes`), once per
        distinct chip; "" for a chip the sweep found invalid (its reason says why)."""
        note = self._notes.get(b.config_json)
        if note is None:
            note = "" if b.reason else capacity_notes(b.chip or chip_from_dict(b.config))
            self._notes[b.config_json] = note
        return note

    def _diff(self, b: BuiltCandidate) -> Encoded:
        """Fields that differ from the baseline, as canonical JSON. Candidates differ from it
        only where a knob sets a field, so only the knob targets need comparing; a chip
        target's part read (and encoded) once per distinct chip, the others' once per
        distinct mapping (a target reads its own section only)."""
        chip = self._diff_parts.get(("chip", b.config_json))
        if chip is None:
            chip = self._diff_parts[("chip", b.config_json)] = canonical_json(self._diff_of(b, True))
        mapping = self._diff_parts.get(("mapping", b.mapping_json))
        if mapping is None:
            mapping = self._diff_parts[("mapping", b.mapping_json)] = canonical_json(self._diff_of(b, False))
        # every "config." field sorts before every "mapping." one: the two objects' texts joined
        if chip == "{}" or mapping == "{}":
            return Encoded(mapping if chip == "{}" else chip)
        return Encoded(chip[:-1] + "," + mapping[1:])

    def _diff_of(self, b: BuiltCandidate, chip: bool) -> dict[str, list]:
        """`_diff`'s fields of the chip targets (`chip`), else of the others."""
        out = {}
        data = {"chip": b.config, "mapping": b.mapping}
        for target in self.spec.hand_targets:  # fields only a hand-picked candidate sets
            section, _, path = target.partition(".")
            if (section == "chip") != chip:
                continue
            # In the knob's terms (a Ball set as its kinds), not as the config spells it.
            mine = _value_at(self.spec, data, target)
            base = _value_at(self.spec, {"chip": self.baseline_data["config"],
                                         "mapping": self.baseline_data["mapping"]}, target)
            if mine != base:
                out[("config." if section == "chip" else "mapping.") + path] = [base, mine]
        for k in self.spec.model.space:
            section, _, path = k.target.partition(".")
            if (section == "chip") != chip:
                continue
            try:
                mine = self.spec.knob_value(k, data)
            except KeyError:  # a field left unset (None) is not recorded
                mine = None
            base = self.spec.space.baseline_values.get(k.name)
            if mine != base:
                out[("config." if section == "chip" else "mapping.") + path] = [base, mine]
        return out

    # -- recording and evaluating ----------------------------------------------------
    def _load_known(self) -> list[Observation]:
        if not self.store.candidate_rows(self.experiment_id, limit=1):  # a new experiment: no frame to read
            return []
        cands = self.store.candidates(self.experiment_id, stage="analytical")
        if cands.empty:
            return []
        table = self.store.metric_table(self.experiment_id, "analytical").set_index("candidate_id")
        metric_names = [c for c in table.columns if c not in {"status", "reason", "stage", "metric_run_id",
                                                                "model_version", "emulator_version"}]
        out = []
        linked = set()
        if not self.reuse:  # candidates standing on reused evidence are evaluated afresh
            runs = self.store.runs(self.experiment_id)
            linked = set(runs.loc[(runs["stage"] == "analytical") & runs["reused_run_id"].notna(), "id"].astype(int))
        for c in cands.to_dict("records"):
            if c["status"] not in DONE or (linked and int(c["run_id"]) in linked):
                continue
            data = {"chip": json.loads(c["config"]), "mapping": json.loads(c["mapping"])}
            params = {}
            for k in self.spec.model.space:
                try:
                    value = self.spec.knob_value(k, data)
                except KeyError:
                    continue
                if value != self.spec.space.baseline_values.get(k.name) or c["origin"] != "baseline":
                    params[k.name] = value
            params = self.spec.space.prune_inactive(params)
            totals = {}
            if c["status"] == "ok" and int(c["id"]) in table.index:
                row = table.loc[int(c["id"])]
                totals = {m: float(row[m]) for m in metric_names if isinstance(row[m], (int, float)) and not math.isnan(row[m])}
            obs = Observation(params, c["status"] == "ok", totals)
            self.known[c["hash"]] = (int(c["id"]), obs)
            self._count(c["status"])
            self._track_best(obs)
            out.append(obs)
        self.result.resumed = len(out)
        return out

    def _evaluate(self, proposals: list[Proposal], origin: str, sampler: Sampler | None, bar,
                  built: list[BuiltCandidate] | None = None, ahead: list[BuiltCandidate] = ()) -> int:
        """Evaluate a batch (`built`: its proposals' candidates, when built already), then
        record it in one transaction, each candidate with its run finished; returns how many
        candidates were new. An interrupt or a crash before that write leaves nothing of the
        batch in the store: a rerun evaluates it again. `ahead`: candidates of batches to
        come, evaluated in this batch's model call and kept (`_ahead`) for their own batch
        to record: a batch of one (the baseline) costs the model's fixed cost a call, one
        candidate more in a large call tens of microseconds."""
        built = built or [self._build(p.params) for p in proposals]
        fresh: dict[str, BuiltCandidate] = {}
        repeats: list[bool] = []  # per proposal: its candidate was evaluated before it (or proposed earlier in the batch)
        self._count_slots(bar, built, origin)
        for b in built:
            repeats.append(b.hash in self.known or b.hash in fresh)
            if not repeats[-1]:
                fresh[b.hash] = b
        new = list(fresh.values())
        if new:
            started_at = utcnow()
            baseline = origin == "baseline"
            # Each candidate's outcome, by its index in `new` (the work items' handle): infeasible
            # before evaluation, an earlier experiment's evidence (reused), else evaluated.
            infeasible = [Outcome(i, "infeasible", b.reason) for i, b in enumerate(new) if b.reason]
            reused = self._reusable({i: b.hash for i, b in enumerate(new) if not b.reason}, "analytical", baseline)
            early, pending = [], []  # evaluated ahead, with an earlier batch; to evaluate now
            for i, b in enumerate(new):
                if b.reason or i in reused:
                    continue
                if (o := self._ahead.pop(b.hash, None)) is not None:
                    o.run_id = i
                    early.append(o)
                else:
                    pending.append((i, b))
            # Batches to come's candidates (not infeasible as built, not known, not of this
            # batch), evaluated with it: by index past `new`.
            later = list({b.hash: b for b in ahead
                          if not b.reason and b.hash not in self.known and b.hash not in fresh}.values())
            pending += enumerate(later, len(new))
            items = [WorkItem(i, b.config_json, b.mapping, b.hash, mapping_json=b.mapping_json) for i, b in pending]
            # evaluated in this process: the collector paused until the batch is recorded
            # (`_collection_paused`); a pool's or a cluster's batch may take minutes
            executor = self._analytical_executor(len(items))
            paused = _collection_paused(self._freezing) if isinstance(executor, InlineExecutor) else None
            with paused or contextlib.nullcontext():
                evaluated = early
                for o in self._evaluated(items, executor):
                    if o.run_id < len(new):
                        evaluated.append(o)
                    else:
                        self._ahead[later[o.run_id - len(new)].hash] = o
                self._batches += 1
                if self._batches == self._stop_after:  # evaluated, not recorded yet
                    with self.store.between_heartbeats():  # paused outside a transaction
                        os.kill(os.getpid(), signal.SIGSTOP)
                self._record(new, infeasible + evaluated, reused, origin, started_at)
                bar.update(len(new))
                if self.stop_requested:
                    raise KeyboardInterrupt
        if sampler is not None and type(sampler).tell is not Sampler.tell:  # (a grid's tell learns nothing)
            told = time.perf_counter()
            for p, b, repeat in zip(proposals, built, repeats):
                sampler.tell(p, self.known[b.hash][1], repeat=repeat)
            self._sampler_seconds += time.perf_counter() - told
        self._tick(bar)
        return len(new)

    def _evaluated(self, items: list[WorkItem], executor) -> list[Outcome]:
        """The analytical outcomes of a batch's work items, in the order the executor returns
        its chunks. A first Ctrl-C with chunks still to come cuts the batch (KeyboardInterrupt):
        none of it is recorded. `executor`: `_analytical_executor`'s for them."""
        chunks = iter(executor.run(self._chunks(items, executor=executor)))
        out: list[Outcome] = []
        spent = 0.0  # in evaluation
        while True:
            started = time.perf_counter()
            chunk_outcomes = next(chunks, None)
            spent += time.perf_counter() - started
            if chunk_outcomes is None:
                break
            out += chunk_outcomes
            if self.stop_requested and len(out) < len(items):
                raise KeyboardInterrupt
        if executor is self._inline_executor and len(items) >= 16:  # a batch large enough to tell the cost
            self._inline_seconds_per_candidate = spent / len(items)
        return out

    def _record(self, new: list[BuiltCandidate], outcomes: list[Outcome], reused: dict, origin: str,
                started_at) -> None:
        """A batch recorded (its candidates `new`, each with its run finished: `outcomes`, by
        index in `new`, or a link to `reused` evidence) and known to the driver."""
        baseline = origin == "baseline"
        if baseline:
            for o in outcomes:
                if o.status == "ok":
                    o.metrics = o.metrics + source_count_metrics(self.captured_graph)
        results: list = [None] * len(new)
        notes = [self._notes_of(b) for b in new]
        for o, row in zip(outcomes, RECORD.run(outcomes)):
            results[o.run_id] = row
            if o.notes:  # what the analytical stage noticed (a placement's pick, its hand-offs), after the chip's notes
                notes[o.run_id] = "; ".join(filter(None, [notes[o.run_id], o.notes]))
        for i, source in reused.items():
            results[i] = dict(reused_run_id=source.run_id)
        recorded = self.recorder.add_finished(self.experiment_id, [
            dict(config=b.config, mapping=b.mapping, config_json=b.config_json, mapping_json=b.mapping_json,
                 hash=b.hash, origin=origin, diff=self._diff(b), notes=note) for b, note in zip(new, notes)],
            results, "analytical", baseline=baseline, started_at=started_at, seed=self.spec.model.search.seed,
            model_version=self.model_version)
        self.result.evaluated += len(new) - len(reused)
        self.result.reused += len(reused)
        known, counts = self.known, self.result.counts
        for i, source in reused.items():
            b = new[i]
            obs = Observation(b.params, source.status == "ok", self.store.source_totals(source.run_id))
            known[b.hash] = (recorded[i][0], obs)
            self._count(source.status)
            self._track_best(obs)
        for o in outcomes:
            b = new[o.run_id]
            known[b.hash] = (recorded[o.run_id][0], Observation(b.params, o.status == "ok", o.totals))
            counts[o.status] = counts.get(o.status, 0) + 1  # `_count`
        self._track_best_of(outcomes)

    def _count_slots(self, bar, built: list[BuiltCandidate], origin: str) -> None:
        """Each proposal fills a slot of the bar's total; a slot whose candidate the bar
        counted already (in this run) is one fewer to do. A trial budget counts new
        candidates only, so a sampler's repeats keep their slot."""
        slots = origin != "sampler" or self._exhaustive
        for b in built:
            if b.hash in self._counted:
                if slots:
                    set_total(bar, bar.total - 1)
            else:
                self._counted.add(b.hash)

    def _ask(self, sampler: Sampler, n: int, bar=None) -> tuple[list[Proposal], list[BuiltCandidate], bool]:
        """Proposals holding up to `n` candidates not evaluated yet, their candidates, and
        whether the sampler ran out. When some propose a candidate already evaluated (or one of the batch once
        more), the sampler is asked again (ASK_ROUNDS at most), so that a batch stays full:
        one transaction and one evaluation per batch, not a tail of small batches (NSGA-II
        repeats itself often). Repeats are told their outcome at once, or with the batch
        for a generational sampler: NSGA-II counts a generation complete at 50 told trials,
        so repeats told at once could complete it while its new candidates still run, and
        it re-selects parents on every ask while a complete generation has trials running
        (over 600 trials its asks took 3x as long)."""
        with _collection_paused(self._freezing):  # (the candidates built live on: `_collection_paused`)
            return self._ask_rounds(sampler, n, bar)

    def _ask_rounds(self, sampler: Sampler, n: int, bar) -> tuple[list[Proposal], list[BuiltCandidate], bool]:
        out: list[Proposal] = []
        built: list[BuiltCandidate] = []
        fresh: set[str] = set()
        for _ in range(ASK_ROUNDS):
            started = time.perf_counter()
            proposals = sampler.ask(n - len(fresh))
            self._sampler_seconds += time.perf_counter() - started
            self.result.proposed_by_sampler += len(proposals)
            if not proposals:
                return out, built, True
            before = len(fresh)
            for p in proposals:
                b = self._build(p.params)
                if b.hash in self.known and not sampler.generational:
                    if bar is not None:
                        self._count_slots(bar, [b], "sampler")
                    started = time.perf_counter()
                    sampler.tell(p, self.known[b.hash][1], repeat=True)
                    self._sampler_seconds += time.perf_counter() - started
                    continue
                if b.hash not in self.known:
                    fresh.add(b.hash)
                out.append(p)  # a repeat among them is told with the batch, in _evaluate
                built.append(b)
            self._idle_rounds = self._idle_rounds + 1 if len(fresh) == before else 0
            if len(fresh) >= n or self._idle_rounds >= IDLE_ROUNDS:
                break
        return out, built, False

    def _analytical_executor(self, n: int):
        """Where a batch of `n` analytical candidates is evaluated. With a local process pool:
        in the driver itself, unless its own measured cost for the batch would exceed
        POOL_ANALYTICAL_MIN_SECONDS. The vectorised model costs well under a millisecond a
        candidate, less than sending the candidate to a worker and its metric rows back,
        and the store writes are the driver's anyway: more workers must not make an
        analytical sweep slower. A Dask cluster (chosen explicitly) always gets the work."""
        if not isinstance(self.executor, PoolExecutor) or POOL_ANALYTICAL_MIN_SECONDS <= 0:
            return self.executor
        per_candidate = self._inline_seconds_per_candidate
        if per_candidate is not None and per_candidate * n > POOL_ANALYTICAL_MIN_SECONDS:
            return self.executor
        return self._inline_executor

    def _chunks(self, items: list[WorkItem], per_chunk: int | None = None, executor=None) -> list[list[WorkItem]]:
        if not items:
            return []
        workers = (executor or self.executor).workers
        parts = max(1, workers * 2) if workers > 1 else 1
        size = per_chunk or max(1, math.ceil(len(items) / parts))
        return [items[i:i + size] for i in range(0, len(items), size)]

    def _reuse(self, runs: dict, stage: str, baseline: bool = False) -> dict:
        """The running runs of `runs` (run id -> candidate hash) that `_reusable` finds
        evidence for: finished as links to that evidence, {run id: its Source}."""
        reused = self._reusable(runs, stage, baseline)
        if reused:
            self.recorder.link_runs({run: src.run_id for run, src in reused.items()})
            self.result.reused += len(reused)
        return reused

    def _reusable(self, hashes: dict, stage: str, baseline: bool = False) -> dict:
        """Of `hashes` (a key -> candidate hash), those whose candidate an earlier experiment
        evaluated at `stage` (same hash, workload, versions and result-affecting settings):
        {key: that run's Source}. A baseline reuses only an earlier baseline (whose run has
        the source-graph counts too)."""
        if not self.reuse or not hashes:
            return {}
        found = self.store.reusable(
            list(hashes.values()), experiment_id=self.experiment_id, workload_hash=self.workload_hash, stage=stage,
            model_version=self.model_version, emulator_version=emulator.VERSION if stage == "emulator" else None,
            settings_ok=lambda text: self._settings(text, stage) == self._settings(self.spec.text, stage))
        if baseline:
            found = {h: src for h, src in found.items()
                     if self.store.experiment(src.experiment_id)["baseline_candidate_id"] == src.candidate_id}
        return {key: found[h] for key, h in hashes.items() if h in found}

    def _settings(self, spec_text: str, stage: str) -> dict | None:
        """A spec's stage settings that change a stage's evidence (not its capture limit, its
        evidence budget or its pruning): None for a text that is no valid spec's stages."""
        if spec_text not in self._settings_of:
            try:
                stages = Stages(**tomllib.loads(spec_text).get("stages", {}))
                self._settings_of[spec_text] = {"analytical": {"ppa": stages.ppa},
                                                # the time limit decides whether a run fails
                                                "emulator": {"ppa": stages.ppa, "traces": stages.traces,
                                                             "host_time_repeats": stages.host_time_repeats,
                                                             "candidate_timeout_s": stages.candidate_timeout_s}}
            except Exception:  # noqa: BLE001 - an unreadable earlier spec: nothing of it is reused
                self._settings_of[spec_text] = {}
        return self._settings_of[spec_text].get(stage)

    def _count(self, status: str) -> None:
        self.result.counts[status] = self.result.counts.get(status, 0) + 1

    def _track_best_of(self, outcomes: list[Outcome]) -> None:
        """`_track_best` of a chunk's outcomes (its feasible ones' first objective)."""
        obj = self.spec.model.objectives[0]
        sign = 1 if obj.direction == "minimize" else -1
        best = None
        for o in outcomes:
            v = o.totals.get(obj.metric) if o.status == "ok" else None
            if v is not None and not math.isnan(v) and (best is None or sign * v < sign * best):
                best = v
        if best is not None and (self.best_objective is None or sign * best < sign * self.best_objective):
            self.best_objective = best

    def _track_best(self, obs: Observation) -> None:
        obj = self.spec.model.objectives[0]
        v = obs.totals.get(obj.metric)
        if obs.feasible and v is not None and not math.isnan(v):
            sign = 1 if obj.direction == "minimize" else -1
            if self.best_objective is None or sign * v < sign * self.best_objective:
                self.best_objective = v

    def _tick(self, bar) -> None:
        # The extreme of the first objective among the feasible, named so: not "best", which
        # is the acceptance's judgement (the best *passing* candidate), told when the sweep ends.
        obj = self.spec.model.objectives[0]
        best = f"{self.best_objective:.4g}" if self.best_objective is not None else "-"
        bar.set_postfix({f"{'min' if obj.direction == 'minimize' else 'max'} {obj.metric}": best,
                         "infeasible": self.result.counts.get("infeasible", 0),
                         "failed": self.result.counts.get("failed", 0)}, refresh=False)

    # -- the sweep -------------------------------------------------------------------
    def _on_sigint(self, signum, frame) -> None:
        # The first Ctrl-C stops after the chunk in hand is recorded; a second one at once.
        if self.stop_requested:
            raise KeyboardInterrupt
        self.stop_requested = True

    def run(self) -> SweepResult:
        # One sweep of an experiment at a time: a second one exits 2 naming the first's
        # process, host and start time (a dead sweep's lock is taken over).
        self.store.acquire_sweep(self.experiment_id, str(self.spec.path))
        try:
            return self._run_locked()
        finally:
            # A lock that cannot be given up now is taken over once this process has ended.
            with contextlib.suppress(Exception):
                self.store.release_sweep(self.experiment_id)

    def _run_locked(self) -> SweepResult:
        in_main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, self._on_sigint) if in_main else None
        # The objects alive before the sweep (torch, the captured graph, ...) are left out of
        # the collector's full passes while it runs: a sweep allocates many long-lived
        # objects (a chip config per candidate under chip knobs, metric rows), and each full
        # pass over the whole heap cost it up to a third of its time.
        frozen = self._freezing = not gc.get_freeze_count()
        if frozen:
            gc.freeze()
        try:
            return self._run()
        finally:
            if frozen:
                gc.unfreeze()
                self._freezing = False
            if in_main:
                signal.signal(signal.SIGINT, previous)

    def _keep_frontend_dumps(self) -> None:
        """The numbered frontend dumps of the experiment's workload as its artifacts, once."""
        if any(row["role"] == "graph_dump" for row in self.store.artifact_rows(self.experiment_id)):
            return
        m = self.spec.model
        dumps = frontend_dumps(m.workload.recipe, m.workload.params, m.baseline.mapping.get("quantization"))
        self.store.put_artifacts([(text.encode(), f"frontend/{name}") for name, text in dumps], role="graph_dump",
                                 experiment_id=self.experiment_id)

    def _run(self) -> SweepResult:
        spec, search = self.spec, self.spec.model.search
        self._keep_frontend_dumps()
        # A hypothesis people have decided keeps its status on a rerun.
        if self.store.experiment(self.experiment_id)["status"] == "proposed":
            self.store.set_status(self.experiment_id, "testing")
        recorded = self._load_known()
        self._sampler = make_sampler(spec)
        self._sampler.replay([o for o in recorded])
        self._exhaustive = self._sampler.exhaustive
        # A slot per candidate the spec asks for: the baseline, the hand-picked, the grid or the trials.
        first = planned(spec.grid_size(), "grid" if self._exhaustive else "sampled", search.trials, search.max_grid,
                        len(spec.hand))
        bar = make_bar(first, len(recorded), spec.name, None if self.progress else True)
        ended = False
        try:
            self._drive(bar)
            ended = True
        except BaseException as stop:  # Ctrl-C: the runs started and not finished are marked crashed
            self.recorder.crash_unfinished("interrupted before this candidate finished")
            if isinstance(stop, KeyboardInterrupt):  # what the interrupted sweep's line says it recorded
                stop.recorded = (self.result.evaluated + self.result.reused, len(self.known))
            raise
        finally:
            if ended:  # 100 % (green in a notebook); an interrupted sweep's bar stays short (red)
                finish(bar, self.result.stopped_early)
            bar.close()
        judged = self.store.settled_run_id(self.experiment_id)  # the runs propose judges
        proposal = propose(self.store, self.experiment_id, spec)
        if proposal is not None:
            self.result.proposed, self.result.decision = proposal.verdict, proposal.rationale
            if judged is not None:  # a rerun's shortcut may stand on the proposal until a newer run
                self.store.set_judged_run(self.experiment_id, judged)
        self.result.status = self.store.experiment(self.experiment_id)["status"]
        self.result.reasons = self.store.reason_groups(self.experiment_id)
        self.result.outcomes = self.store.latest_status_counts(self.experiment_id)
        return self.result

    # -- the chain, driven ---------------------------------------------------------------
    def _drive(self, bar) -> None:
        """The chain's stages after SETUP, in the chain's order, each on the output of the
        one before: a stage the driver knows by name runs as its step (batches, executors,
        the store: `_steps`), any other as itself (`stage.run(value)`), so a stage inserted
        into the chain sees what the stage before it made and hands its output on. Each
        driven stage's time is the sweep's `seconds[stage.name]`, but the record stage's:
        the store writes' own time, wherever they happen."""
        steps = self._steps()
        # The stages after the emulator's, up to the record stage, run in the emulator's
        # work items (`chain.evaluation`): their verdicts are in its outcomes already.
        in_workers = {stage.name for stage in evaluation(self.chain)["emulator"][1:]}
        value = None
        for stage in self.chain:
            if stage.name in SETUP_NAMES or stage.name in in_workers:
                continue
            started = time.perf_counter()
            step = steps.get(stage.name)
            value = step(value, bar) if step is not None else stage.run(value)
            if stage.name != RECORD.name:
                self.result.seconds[stage.name] = (self.result.seconds.get(stage.name, 0.0)
                                                   + time.perf_counter() - started)

    def _steps(self) -> dict:
        return {ANALYTICAL.name: self._analytical_step, PRUNE.name: self._prune_step,
                EMULATOR.name: self._emulator_step, RECORD.name: self._record_step}

    def _analytical_step(self, _, bar) -> list[tuple[int, bool, dict]]:
        """The baseline, the hand-picked candidates, then the sampler's batches, each batch
        through the analytical stage; what the prune stage takes: (candidate id, feasible,
        analytical totals) per candidate evaluated."""
        spec, search, sampler, exhaustive = self.spec, self.spec.model.search, self._sampler, self._exhaustive
        batch = batch_size(spec, sampler, self.executor.workers)
        deadline = time.monotonic() + search.wall_seconds if search.wall_seconds else None
        done_sampled = max(self.result.resumed - 1, 0)  # the sampled candidates recorded already
        origin = "grid" if sampler_kind(spec) == "grid" else "sampler"
        # The first batch asked now, and evaluated in one model call with the baseline and the
        # hand-picked candidates (each batch still recorded in its own transaction, in this
        # order). The sampler has not seen the baseline: a proposal of it is the first
        # batch's repeat, told as such.
        n = batch if exhaustive else min(batch, search.trials - done_sampled)
        first = self._ask(sampler, n, bar) if n > 0 else None
        hand = [Proposal(params) for params, _ in spec.hand]
        hand_built = [self._build(p.params) for p in hand]
        self._evaluate([Proposal({})], "baseline", None, bar, ahead=hand_built + (first[1] if first else []))
        if spec.hand:  # the hand-picked candidates, each with its why
            self._evaluate(hand, "hand", None, bar, hand_built)
            base_hash = self._build({}).hash
            whys = {self.known[b.hash][0]: why for (params, why) in spec.hand
                    if (b := self._build(params)).hash in self.known and b.hash != base_hash}
            self.store.set_whys(whys)
        while True:
            if self.stop_requested:
                raise KeyboardInterrupt
            if deadline is not None and time.monotonic() > deadline:
                self.result.stopped_early = f"wall time of {search.wall_seconds} s reached"
                break
            n = batch if exhaustive else min(batch, search.trials - done_sampled)
            if n <= 0:
                break
            proposals, built, exhausted = first or self._ask(sampler, n, bar)
            first = None
            if proposals:
                done_sampled += self._evaluate(proposals, origin, sampler, bar, built)
            elif exhausted:
                break
            # A sampled space smaller than the budget proposes only repeats in the end.
            if self._idle_rounds >= IDLE_ROUNDS:
                self.result.stopped_early = "the sampler proposes only candidates already evaluated"
                break
        self._ahead.clear()  # (a batch cut short by the deadline: its outcomes, unrecorded)
        # Where the analytical phase's time went besides: the sampler's ask and tell (the
        # store writes are the record stage's).
        self.result.seconds["sampler"] = self._sampler_seconds
        set_total(bar, bar.n)  # the analytical phase done: its candidates are all there were
        return [(cid, obs.feasible, obs.totals) for cid, obs in self.known.values()]

    def _record_step(self, outcomes, bar):
        self.result.seconds[RECORD.name] = self.recorder.seconds
        return outcomes

    # -- the emulator stage ------------------------------------------------------------
    def _keep_raw_evidence(self, outcomes) -> None:
        """Each emulator run's raw evidence as content-addressed artifacts of the run, within
        the spec's evidence budget (what would exceed it is not kept; the sweep says so)."""
        budget = self.spec.model.stages.evidence_budget_mb * 2 ** 20
        for o in outcomes:
            for role, name, data in o.artifacts:
                if self._evidence_bytes is None:
                    self._evidence_bytes = self.store.evidence_bytes()
                if self._evidence_bytes + len(data) > budget:
                    self.result.evidence_skipped += 1
                    continue
                ref = self.store.put_artifact(data, role=role, run_id=o.run_id, name=name,
                                              media_type="application/json" if name.endswith(".json") else None)
                self._evidence_bytes += ref.size
            o.artifacts = []

    def _prune_step(self, analysed, bar) -> list[int]:
        """The candidates to emulate (the analytically best); every other one recorded as
        pruned, with the reason, so the records say why it was not emulated."""
        stages = self.spec.model.stages
        if stages.emulator == "none":
            return []
        obj = self.spec.model.objectives[0]
        runs = self.store.runs(self.experiment_id)
        emulated = (runs["stage"] == "emulator") & runs["status"].isin(DONE)
        if not self.reuse:  # runs standing on reused evidence: evaluated afresh
            emulated &= runs["reused_run_id"].isna()
        done = set(runs.loc[emulated, "candidate_id"].astype(int))
        infeasible = runs[(runs["stage"] == "analytical") & (runs["status"] == "infeasible")]
        reasons = {int(c): str(r or "") for c, r in zip(infeasible["candidate_id"], infeasible["reason"])}
        pruning = PRUNE.run(analysed, done,
                            stages.emulator, stages.top_k, obj.metric, obj.direction, reasons)
        todo, pruned = pruning.emulate, pruning.pruned
        if pruned:
            run_ids = self.recorder.start_runs([c for c, _ in pruned], "emulator", model_version=self.model_version,
                                               emulator_version=emulator.VERSION)
            self.recorder.finish_runs([Outcome(r, "pruned", why) for r, (_, why) in zip(run_ids, pruned)])
        return todo

    def _emulator_step(self, todo: list[int], bar) -> list[Outcome]:
        """The candidates `todo` emulated (the chain's evaluation stages in workers, each
        with its time limit); their outcomes, recorded."""
        out: list[Outcome] = []
        if not todo:
            return out
        stages = self.spec.model.stages
        cands = self.store.candidates(self.experiment_id).set_index("id")
        # The emulated candidates on the bar too: minutes each, where the analytical were milliseconds.
        bar.set_description(f"{self.spec.name}: emulate")
        set_total(bar, bar.total + len(todo))
        run_ids = self.recorder.start_runs(todo, "emulator", model_version=self.model_version,
                                           emulator_version=emulator.VERSION)
        reused = self._reuse({r: str(cands.loc[cid, "hash"]) for r, cid in zip(run_ids, todo)}, "emulator")
        for r in reused:
            self._count(f"emulator {reused[r].status}")
        bar.update(len(reused))
        items = [WorkItem(r, canonical_json(json.loads(cands.loc[cid, "config"])), json.loads(cands.loc[cid, "mapping"]),
                          str(cands.loc[cid, "hash"]), stage="emulator") for r, cid in zip(run_ids, todo) if r not in reused]
        if not items:
            return out
        # The emulator stage has a time limit per candidate: it runs in worker processes,
        # which can be killed past it (one worker when the sweep has no pool of its own).
        executor = own = None
        if isinstance(self.executor, InlineExecutor):
            executor = own = PoolExecutor(self.executor.work, 1)
        executor = executor or self.executor
        try:
            for outcomes in executor.run(self._chunks(items, per_chunk=1), timeout=stages.candidate_timeout_s):
                self._keep_raw_evidence(outcomes)  # the files and their rows before the run is finished
                self.recorder.finish_runs(outcomes)
                out += outcomes
                for o in outcomes:
                    self._count(f"emulator {o.status}")
                bar.update(len(outcomes))
                if self.stop_requested:
                    raise KeyboardInterrupt
        except BaseException:
            self.recorder.crash_unfinished("interrupted before this candidate finished")
            raise
        finally:
            if own is not None:
                own.close()
        return out


def quantizations(spec: Spec) -> list[str | None]:
    """The quantize choices (`Mapping.quantize_choice`: weight granularity, calibration
    rule and activation scales) a spec's candidates can have (None: the recipe's own steps)."""
    def values(target: str, baseline):
        out = [baseline]
        for k in spec.model.space:
            if k.target == target:
                out += k.values
                if k.when:  # inactive: the baseline's
                    out.append(baseline)
        return list(dict.fromkeys(out))

    base = spec.baseline_mapping
    choices = [base.model_copy(update={"quantization": w, "calibration": c, "activation_scales": a}).quantize_choice
               for w in values(QUANTIZATION_TARGET, base.quantization)
               for c in values(CALIBRATION_TARGET, base.calibration)
               for a in values(ACTIVATION_SCALES_TARGET, base.activation_scales)]
    return list(dict.fromkeys(choices))


def _value_at(spec: Spec, data: dict, dotted: str):
    """The value at a dotted path of {"chip": ..., "mapping": ...} in its knob's terms
    (`Spec.target_value`: a Ball set as its kinds), None where unset."""
    try:
        return spec.target_value(dotted, data)
    except (KeyError, TypeError):
        return None


def declared_routing(spec: Spec, graph) -> tuple | None:
    """(routing, capacity factor) the analytical model costs the MoE layers with (None: the
    graph has none); a routing or capacity for a workload with no MoE layer is the spec's
    error."""
    w = spec.model.workload
    if moe_layers(graph):
        return parse_routing(w.routing), w.capacity_factor
    if w.routing != "measured" or w.capacity_factor is not None:
        field = "workload.routing" if w.routing != "measured" else "workload.capacity_factor"
        raise InputError(spec.path, field, w.routing if w.routing != "measured" else w.capacity_factor,
                         f"unset: recipe '{w.recipe}' has no mixture-of-experts layer")
    return None


def sweep_into_store(spec: Spec, db: str | Path = "records.db", progress: bool = True,
                     workers: int = 1, cluster: str | None = None,
                     connect_timeout: float = CONNECT_TIMEOUT_S, reuse: bool = True,
                     chain: tuple[Stage, ...] = CHAIN) -> SweepResult:
    """Sweep a validated spec into the store: the chain's SETUP stages (capture, frontend,
    plan: each the chain's stage of that name), then `Sweep` driving the rest of `chain`
    (what `dse.runner.run_sweep` does when the store does not hold the whole sweep already)."""
    named = {stage.name: stage for stage in chain}
    checked_url(db)  # a bad --db says so before the recipe's capture (Store checks it again)
    if spec.model.experiment.links() and "://" not in str(db) and not Path(db).exists():
        resolve_links(spec, None)  # a link into a store that does not exist: nothing created
    recipe, params = spec.model.workload.recipe, spec.model.workload.params
    with capture_limit(spec.path, spec.model.stages, f"the capture of recipe '{recipe}' and its frontend steps"):
        # The emulation workloads: one per quantization granularity the candidates can set.
        emulated = quantizations(spec) if spec.model.stages.emulator != "none" else ()
        # Checked when the emulator needs the recipe's own steps checked: the one run of
        # the pipeline that the frontend stage then reads from the graph cache.
        graph = named[CAPTURE.name].run(recipe, params, None in emulated)
        work = named[FRONTEND.name].run(recipe, params, emulated)
        staged = spec.model.workload.all_stages()
        if staged:  # every stage's analytical graph and, with the emulator stage, its emulation
            work.stages = [(role, analytical_graph(r, p)) for role, r, p in staged]
            if emulated:
                work.placed_emulation = prepare_placed(staged)
    named[PLAN.name].run(work.graph)
    work.routing = declared_routing(spec, work.graph)
    work.host_time_repeats = spec.model.stages.host_time_repeats
    work.evaluation = evaluation(chain)  # what the workers run of the chain
    work.traces = spec.model.stages.traces
    if not spec.model.stages.ppa:  # cycles only: no area, energy or power (no CACTI)
        work.ppa_calibration = None
    with Store(db) as store:
        model_version = MODEL_VERSION
        if spec.model.stages.calibration == "newest":
            name = spec.baseline_chip.name
            cal = store.latest_calibration(name)
            if cal is not None:
                work.calibration = {name: cal["constants"]}
                model_version = f"{MODEL_VERSION}+calibration-{cal['id']}"
            # the newest area (synth_area) and energy (power) factors by component
            ppa = store.latest_ppa_records(name)
            if ppa:
                work.ppa_calibration = {name: ppa_factors(ppa)}
                model_version += ppa_version(ppa)
        executor = make_executor(work, workers, cluster, connect_timeout)
        try:
            return Sweep(spec, graph, store, executor, progress, model_version, reuse, chain).run()
        finally:
            executor.close()
