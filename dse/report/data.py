"""What a report shows, assembled from the store (no rendering here)."""

from __future__ import annotations

import functools
import json
import tomllib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..records import Store
from ..records.report_reads import ComponentFigures
from ..runner.acceptance import (Headline, Judgement, figures_wanted, headline, judge_experiment,  # noqa: F401
                                 outcome_mark)
from ..runner.metrics import COUNTER_SCOPES, HOST_PHASE_METRIC, METRICS
from ..runner.noise import HOST_TIME, HostTimeComparison, host_time_comparison
from .pareto import pareto_mask



@dataclass
class ExperimentView:
    exp: dict
    objectives: list[dict]
    table: pd.DataFrame  # one row per candidate: status, reason, origin, changes, total metrics
    baseline_id: int | None
    best_id: int | None
    compare: pd.DataFrame | None  # field, baseline, best, delta, ratio (only differing fields)
    decisions: pd.DataFrame
    provenance: dict
    counts: dict
    emulated: pd.DataFrame  # candidates run on both: analytical vs emulator latency, the model's error
    core_time: pd.DataFrame  # emulated candidates x cores: busy, waiting, waiting by cause
    passing: np.ndarray  # per row of `table`: feasible, not the baseline, meets every acceptance criterion
    notes: list[dict]  # limitations, open questions and notes added after the fact (`dse note`)
    store: Store = field(repr=False, compare=False, default=None)
    # The one judgement of acceptance over every evidence kind (`dse.runner.acceptance`),
    # whose passing candidates and best `passing` and `best_id` are, and its headline.
    judgement: Judgement | None = field(repr=False, compare=False, default=None)
    headline: Headline | None = None
    # The emulator host times of the baseline and the best, said as a real difference or as
    # noise (`dse.runner.noise`); None without both.
    host_time: HostTimeComparison | None = None
    # Runs standing on an earlier experiment's evidence (dse.records.reuse): candidate, run,
    # stage and the sentence naming what they reuse.
    reused: list[dict] = field(default_factory=list)
    # Reads of a few candidates' figures kept once made: the report's PNG and interactive
    # figures read the same ones (and its interactive ones are built in a child process
    # that must not use the store's connection: `dse.report.aside`).
    _kept: dict = field(default_factory=dict, repr=False, compare=False)

    def _read(self, key: tuple, read):
        if key not in self._kept:
            self._kept[key] = read()
        return self._kept[key]

    @property
    def outcomes(self) -> list[str | None]:
        """Per row of `table`: "pass", "fail", "waiting" (for evidence) or None (not judged:
        infeasible, or the baseline)."""
        return self.judgement.outcomes_of(self.table["candidate_id"].astype(int).tolist())

    @functools.cached_property
    def op_cycles(self) -> pd.DataFrame:
        """Rows: every candidate id, columns: op name (analytical cycles), in graph order."""
        return self.op_cycles_of(None)

    def op_cycles_of(self, candidate_ids: list[int] | None) -> pd.DataFrame:
        """`op_cycles` for these candidates only (None: all); a report needs a few of 100,000."""
        return self.op_metric_of(candidate_ids, "cycles")

    def op_metric_of(self, candidate_ids: list[int] | None, name: str) -> pd.DataFrame:
        """An analytical per-op metric ("cycles", "energy_uj") of these candidates (None: all)."""
        return self._read(("op", name, None if candidate_ids is None else tuple(candidate_ids)),
                          lambda: self.store.op_metric_table(int(self.exp["id"]), candidate_ids, name))

    def counters_of(self, candidate_ids: list[int]) -> dict[str, list[dict]]:
        """The emulator's counters kept as metrics (`dse.runner.metrics.COUNTER_SCOPES`:
        per Ball, bank, DMA engine, system bus) and its host time by phase, of these
        candidates: {scope: rows (candidate_id, scope_key, one column a metric)}, each from
        the candidate's latest run recording it; a row all zeros (an idle Ball, a bank no
        instruction touched) left out, so the tables stay short."""
        out = {}
        for kind, scope in [("emulator_cycles", s) for s in ("ball", "bank", "dma", "bus")] + [
                ("emulator_host_time", "phase")]:
            table = self.store.metric_table(int(self.exp["id"]), kind, scope)
            table = table[table["candidate_id"].isin(candidate_ids) & table["scope_key"].notna()]
            names = [c for c in COUNTER_SCOPES.get(scope, (HOST_PHASE_METRIC,)) if c in table.columns]
            if table.empty or not names:
                continue
            table = table[(table[names].fillna(0) != 0).any(axis=1)]
            out[scope] = table[["candidate_id", "scope_key", *names]].to_dict("records")
        return out

    def components_of(self, candidate_ids: list[int], kind: str) -> ComponentFigures:
        """Area and energy by component of these candidates, evidence kind `kind`."""
        return self._read(("components", kind, tuple(candidate_ids)),
                          lambda: self.store.component_figures(int(self.exp["id"]), candidate_ids, kind))


def _objectives(spec_text: str) -> list[dict]:
    spec = tomllib.loads(spec_text) if spec_text else {}
    return spec.get("objectives") or [{"metric": "latency_cycles", "direction": "minimize"}]


def _as_obj(value):
    if isinstance(value, str):
        return json.loads(value) if value else None
    return value


def _changes(diff) -> str:
    diff = _as_obj(diff) or {}
    return ", ".join(f"{k.removeprefix('config.').removeprefix('mapping.')}={v[1]}" for k, v in diff.items()) or "(baseline)"


def experiment_view(store: Store, experiment) -> ExperimentView:
    exp = store.experiment(experiment)
    exp["acceptance"] = _as_obj(exp.get("acceptance")) or []
    objectives = _objectives(exp.get("spec_text", ""))
    first = objectives[0]
    objective = {"metric": first["metric"], "direction": first.get("direction", "minimize")}
    # The figures of the table and of the judgement, read once.
    wanted = figures_wanted(exp, objective)
    wanted["analytical"] |= set(METRICS)
    found = store.figure_columns(sorted(wanted), sorted(set().union(*wanted.values())), int(exp["id"]), with_runs=True)
    table = store.candidate_metrics(int(exp["id"]), list(METRICS), found)
    baseline_id = exp.get("baseline_candidate_id")
    baseline_id = int(baseline_id) if baseline_id is not None and not pd.isna(baseline_id) else None
    # "Best" is the verdict's: the best candidate passing the acceptance criteria, judged on
    # every evidence kind they name (the sweep's and `dse decide`'s judgement).
    judgement = judge_experiment(store, exp, objective, figures=found)
    passing = judgement.mask(table["candidate_id"].astype(int).tolist())
    best_id = judgement.best

    compare = None
    if best_id is not None and baseline_id is not None:
        c = store.compare(baseline_id, best_id)
        # Source counts describe the workload, not a candidate: they are recorded once.
        c = c[~c["field"].str.startswith("source_counts:")].rename(columns={"a": "baseline", "b": "best"})
        num = lambda s: pd.to_numeric(s, errors="coerce")  # noqa: E731
        c["delta"] = num(c["best"]) - num(c["baseline"])
        c["ratio"] = num(c["best"]) / num(c["baseline"])
        compare = c.reset_index(drop=True)

    last_run = store.last_run_id(int(exp["id"]))
    emulated_any = sum(store.emulator_runs(int(exp["id"])).values())
    provenance = {}
    if last_run is not None:
        last = store.run(last_run)
        provenance = {k: last.get(k) for k in ("host", "git_commit", "git_dirty", "model_version",
                                               "emulator_version", "versions", "command")}
    emulated = model_vs_emulator(store, exp["id"], table, bool(emulated_any))
    core_time = (store.metric_table(exp["id"], "emulator_cycles", scope="core") if emulated_any
                 else pd.DataFrame(columns=["candidate_id", "scope_key"]))
    decisions = store.decisions(exp["id"])
    host_time = None
    if emulated_any and compare is not None:
        both = store.compare_metrics(baseline_id, best_id)
        both = both[both["kind"] == HOST_TIME]
        figures = [{r["name"]: float(r[side]) for r in both.to_dict("records") if r[side] == r[side]}
                   for side in ("a", "b")]
        identical = not compare["field"].str.startswith(("config.", "mapping.")).any()
        host_time = host_time_comparison(*figures, identical=identical, names=("baseline", "best"))
    return ExperimentView(exp, objectives, table, baseline_id, best_id, compare, decisions,
                          provenance, table["status"].value_counts().to_dict(), emulated, core_time,
                          passing, store.notes(exp["id"]), store, judgement,
                          headline(judgement, exp, store.decision_rows(exp["id"])), host_time,
                          reused_evidence(store, exp["id"]))


def reused_evidence(store: Store, experiment_id: int) -> list[dict]:
    """The experiment's runs that link to an earlier experiment's evidence, by run id."""
    runs = store.reused_run_rows(int(experiment_id))
    return [{"candidate_id": int(r["candidate_id"]), "run_id": int(r["id"]), "stage": r["stage"],
             "text": r["reused_from"]} for r in runs]


def model_vs_emulator(store: Store, experiment_id: int, table: pd.DataFrame, emulated_any: bool = True
                      ) -> pd.DataFrame:
    """Candidates with both evidence kinds: their analytical latency (from `table`, the
    `Store.candidate_metrics` rows) and emulator cycles, and the model's error in percent,
    (analytical - emulator) / emulator. Two kinds side by side, never one column."""
    emulated = pd.DataFrame(columns=["candidate_id", "analytical_cycles", "emulator_cycles", "error_pct"])
    # Emulator evidence only when there is some (the table reads every candidate).
    emu = store.metric_table(experiment_id, "emulator_cycles") if emulated_any else pd.DataFrame()
    if "latency_cycles" in emu and "latency_cycles" in table:
        both = emu[["candidate_id", "latency_cycles"]].dropna().merge(
            table[["candidate_id", "latency_cycles"]].dropna(), on="candidate_id", suffixes=("_emu", "_model"))
        emulated = pd.DataFrame({"candidate_id": both["candidate_id"].astype(int),
                                 "analytical_cycles": both["latency_cycles_model"].astype(float),
                                 "emulator_cycles": both["latency_cycles_emu"].astype(float)})
        emulated["error_pct"] = 100.0 * (emulated["analytical_cycles"] - emulated["emulator_cycles"]) \
            / emulated["emulator_cycles"]
    return emulated


def changes(diff) -> str:
    """A candidate's changes from the baseline, short ("banks.count=16, workers=2")."""
    return _changes(diff)


def accepted_candidates(decisions: pd.DataFrame) -> set[int]:
    """Candidates whose latest decision accepts them."""
    if decisions.empty:
        return set()
    on = decisions.dropna(subset=["candidate_id"]).sort_values("id").groupby("candidate_id").tail(1)
    return {int(c) for c in on.loc[on["verdict"] == "accepted", "candidate_id"]}


# A candidate table's marks (the report's and the UI's), the Pareto plots' symbols: the best
# passing candidate, on the plot's front, accepted by a person's decision.
MARKS = {"best": "★", "front": "◆", "accepted": "◇"}


def row_marks(candidate_id: int, *, baseline_id: int | None, best_id: int | None, accepted: set[int],
              front: set[int]) -> list[str]:
    """A candidate's marks in a table: "baseline", "★ best", "◆ front", "◇ accepted"."""
    out = ["baseline"] if candidate_id == baseline_id else []
    for name, on in (("best", candidate_id == best_id), ("front", candidate_id in front),
                     ("accepted", candidate_id in accepted)):
        if on:
            out.append(f"{MARKS[name]} {name}")
    return out


def front_of(judgement: Judgement, x: str, y: str, directions: tuple[str, str]) -> set[int]:
    """The candidates on the Pareto front of analytical x and y (the judgement's figures,
    read with `judge_experiment(..., metrics=[x, y])`), of the feasible ones with both."""
    xs, ys = judgement.values("analytical", x), judgement.values("analytical", y)
    feasible = np.array([s == "ok" for s in judgement.status], dtype=bool) & ~np.isnan(xs) & ~np.isnan(ys)
    if not feasible.any():
        return set()
    on = pareto_mask(np.column_stack([xs[feasible], ys[feasible]]), list(directions))
    return {int(c) for c in judgement.ids[feasible][on]}


def meaningful_candidates(table: pd.DataFrame, baseline_id: int | None, best_id: int | None,
                          accepted: set[int]) -> dict[int, str]:
    """{candidate: label} of the candidates worth a per-op look: the baseline, the best (the
    verdict's, `acceptance.Judgement.best`) and those a person accepted, feasible ones only,
    in that order; one candidate in two roles gets both labels ("best, accepted")."""
    named = {int(i) for i in (baseline_id, best_id, *accepted) if i is not None}
    feasible = set(int(i) for i in table.loc[(table["status"] == "ok") & table["candidate_id"].isin(named),
                                             "candidate_id"])
    labels: dict[int, list[str]] = {}
    for ident, role in ((baseline_id, "baseline"), (best_id, "best"), *((i, "accepted") for i in sorted(accepted))):
        if ident is not None and int(ident) in feasible:
            labels.setdefault(int(ident), []).append(role)
    return {i: ", ".join(roles) for i, roles in labels.items()}


# The evidence kinds that record area and energy by component (`dse.ppa`), in the order
# views show them; each is drawn on its own, never in one bar with another.
PPA_KINDS = ("analytical", "emulator_cycles")


def stored_bank_lifetimes(store, candidate_id: int) -> tuple[int | None, list[dict]]:
    """The bank lifetimes the candidate's latest emulator run recorded (its banks.json,
    written by `dse.lower.banks.bank_lifetimes`): (run id, rows), or (None, []) when no run
    kept them."""
    rows = [a for a in store.artifact_rows(candidate=candidate_id) if a["name"] == "banks.json" and a["run_id"]]
    if not rows:
        return None, []
    latest = max(rows, key=lambda a: a["run_id"])
    path = store.artifact_path(latest["sha256"])
    return int(latest["run_id"]), json.loads(path.read_bytes()) if path.exists() else []
