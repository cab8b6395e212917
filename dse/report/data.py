"""What a report shows, assembled from the store (no rendering here)."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass

import pandas as pd

from ..records import Store

MAX_CHOSEN = 5  # candidates in the per-op breakdown: baseline, best, then the front


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
    op_cycles: pd.DataFrame  # rows: candidate id, columns: op name (analytical cycles), in graph order
    counts: dict
    emulated: pd.DataFrame  # candidates run on both: analytical vs emulator latency, the model's error
    core_time: pd.DataFrame  # emulated candidates x cores: busy, waiting, waiting by cause
    notes: list[dict]  # limitations, open questions and notes added after the fact (`dse note`)


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
    table = store.metric_table(exp["id"], "analytical").copy()
    cands = store.candidates(exp["id"]).set_index("id")
    table["origin"] = table["candidate_id"].map(cands["origin"])
    table["changes"] = table["candidate_id"].map(lambda i: _changes(cands.loc[i, "diff"]))
    objectives = _objectives(exp.get("spec_text", ""))
    first = objectives[0]
    ok = table[table["status"] == "ok"]
    best_id = None
    if len(ok) and first["metric"] in ok:
        asc = first.get("direction", "minimize") == "minimize"
        best_id = int(ok.sort_values([first["metric"], "candidate_id"], ascending=[asc, True]).iloc[0]["candidate_id"])
    baseline_id = exp.get("baseline_candidate_id")
    baseline_id = int(baseline_id) if baseline_id is not None and not pd.isna(baseline_id) else None

    compare = None
    if best_id is not None and baseline_id is not None:
        c = store.compare(baseline_id, best_id)
        # Source counts describe the workload, not a candidate: they are recorded once.
        c = c[~c["field"].str.startswith("source_counts:")].rename(columns={"a": "baseline", "b": "best"})
        num = lambda s: pd.to_numeric(s, errors="coerce")  # noqa: E731
        c["delta"] = num(c["best"]) - num(c["baseline"])
        c["ratio"] = num(c["best"]) / num(c["baseline"])
        compare = c.reset_index(drop=True)

    metrics = store.metrics(exp["id"], kind="analytical")
    ops = metrics[(metrics["scope"] == "op") & (metrics["name"] == "cycles")]
    op_order = list(dict.fromkeys(ops["scope_key"]))
    op_cycles = ops.pivot_table(index="candidate_id", columns="scope_key", values="value", aggfunc="last")
    op_cycles = op_cycles.reindex(columns=op_order)

    runs = store.runs(exp["id"])
    provenance = {}
    if len(runs):
        last = runs.iloc[-1]
        provenance = {k: last.get(k) for k in ("host", "git_commit", "git_dirty", "model_version",
                                               "emulator_version", "versions", "command") if k in runs}
    emu = store.metric_table(exp["id"], "emulator_cycles")
    emulated = pd.DataFrame(columns=["candidate_id", "analytical_cycles", "emulator_cycles", "error_pct"])
    if "latency_cycles" in emu:
        both = emu[["candidate_id", "latency_cycles"]].dropna().merge(
            table[["candidate_id", "latency_cycles"]].dropna(), on="candidate_id", suffixes=("_emu", "_model"))
        emulated = pd.DataFrame({"candidate_id": both["candidate_id"].astype(int),
                                 "analytical_cycles": both["latency_cycles_model"],
                                 "emulator_cycles": both["latency_cycles_emu"]})
        emulated["error_pct"] = 100.0 * (emulated["analytical_cycles"] - emulated["emulator_cycles"]) \
            / emulated["emulator_cycles"]
    core_time = store.metric_table(exp["id"], "emulator_cycles", scope="core")
    return ExperimentView(exp, objectives, table, baseline_id, best_id, compare, store.decisions(exp["id"]),
                          provenance, op_cycles, table["status"].value_counts().to_dict(), emulated, core_time,
                          store.notes(exp["id"]))


def chosen_candidates(view: ExperimentView, front_ids: list[int]) -> list[int]:
    """Baseline, best, then Pareto-front members, without repeats."""
    ids = [i for i in (view.baseline_id, view.best_id) if i is not None]
    for i in sorted(front_ids):
        if i not in ids:
            ids.append(i)
    return [i for i in ids if i in view.op_cycles.index][:MAX_CHOSEN]
