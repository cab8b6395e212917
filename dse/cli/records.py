"""Record-store commands: `dse history`, `dse show`, `dse compare`, `dse decide`, `dse export`."""

from __future__ import annotations

import getpass
import json
import math
import os
import re

from ..errors import InputError
from .common import add_db_argument, open_store

# `dse show c12` (candidate), `dse show r7` (run); a name or a bare id is an experiment.
_PREFIXED = re.compile(r"(c|cand|candidate|r|run|e|exp|experiment)[:#-]?(\d+)", re.IGNORECASE)
_SHOW_ALLOWED = "an experiment name or id, c<ID> for a candidate, or r<ID> for a run"


def _pandas():
    import pandas as pd

    return pd


def _table(frame, max_colwidth: int = 60) -> str:
    pd = _pandas()
    with pd.option_context("display.width", 250, "display.max_colwidth", max_colwidth,
                           "display.max_columns", None, "display.max_rows", None):  # fmt: skip
        return frame.to_string(index=False)


def _one_line(text, width: int = 70) -> str:
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return ""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _num(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    if isinstance(value, (int, float)):
        return f"{value:,.6g}"
    return str(value)


def _candidate_id(text: str, field: str) -> int:
    digits = str(text).strip().lstrip("cC").lstrip(":#")
    if not digits.isdigit():
        raise InputError("dse", field, text, "a candidate id (a whole number, as `dse show` lists)")
    return int(digits)


def _when(moment) -> str:
    pd = _pandas()
    if moment is None or pd.isna(moment):
        return "—"
    return pd.Timestamp(moment).strftime("%Y-%m-%d %H:%M:%S")


# ---- dse history --------------------------------------------------------------------------


def cmd_history(args) -> int:
    # Plain rows, no pandas: `dse history` stays quick on a large store.
    with open_store(args.db) as store:
        exps = store.experiment_summaries()
        decisions = store.decisions() if args.decisions else None
    if not exps:
        print("no experiments yet")
        return 0
    header = ["id", "name", "status", "candidates", "ok", "infeasible", "pruned", "failed",
              "crashed", "running", "decision", "hypothesis"]  # fmt: skip
    rows = []
    for e in exps:
        decision = e["latest_verdict"] or ""
        if decision and e["latest_candidate_id"] is not None:
            decision += f" c{e['latest_candidate_id']}"
        rows.append([e["id"], e["name"], e["status"], e["n_candidates"], e["n_ok"], e["n_infeasible"],
                     e["n_pruned"], e["n_failed"], e["n_crashed"], e["n_running"], decision,
                     _one_line(e["hypothesis"], 60)])  # fmt: skip
    print(_plain_table(header, rows, left={"name", "status", "decision", "hypothesis"}))
    print("(status: of the hypothesis; ok … running: runs by status; decision: the latest)")
    if decisions is not None:
        print()
        if decisions.empty:
            print("no decisions yet")
        else:
            shown = decisions[["id", "experiment", "verdict", "candidate_id", "author"]].copy()
            shown.insert(1, "when", decisions["created_at"].map(_when))
            shown["rationale"] = decisions["rationale"].map(_one_line)
            print(_table(shown.rename(columns={"candidate_id": "candidate"}), 70))
    return 0


def _plain_table(header: list[str], rows: list[list], left: set[str] = frozenset()) -> str:
    cells = [header] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for row in cells:
        parts = [v.ljust(w) if h in left else v.rjust(w) for v, w, h in zip(row, widths, header)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


# ---- dse show -----------------------------------------------------------------------------


def _resolve(store, text: str) -> tuple[str, int]:
    from ..records import RecordNotFound

    try:  # an experiment's own name wins over the c<ID>/r<ID> shorthands
        return "experiment", int(store.experiment(text)["id"])
    except RecordNotFound:
        pass
    match = _PREFIXED.fullmatch(text.strip())
    if match:
        prefix = match.group(1).lower()
        kind = {"c": "candidate", "cand": "candidate", "r": "run", "e": "experiment",
                "exp": "experiment"}.get(prefix, prefix)  # fmt: skip
        return kind, int(match.group(2))
    names = store.experiments()["name"].tolist()
    known = f"; experiments: {', '.join(names[:12])}" + (" …" if len(names) > 12 else "") if names else ""
    raise InputError(store.url, "ID", text, _SHOW_ALLOWED + known)


def cmd_show(args) -> int:
    with open_store(args.db) as store:
        kind, ident = _resolve(store, args.id)
        if kind == "experiment":
            _show_experiment(store, ident, args.limit)
        elif kind == "candidate":
            _show_candidate(store, ident)
        else:
            _show_run(store, ident)
    return 0


def _show_experiment(store, ident: int, limit: int) -> None:
    exp = store.experiment(ident)
    cands = store.candidates(exp["id"], lean=True)
    decisions = store.decisions(exp["id"])
    artifacts = store.artifacts(exp["id"])
    print(f"experiment {exp['id']} '{exp['name']}'  hypothesis {exp['status']}  "
          f"(created {_when(exp['created_at'])})")  # fmt: skip
    print(f"hypothesis: {exp['hypothesis']}")
    print("acceptance:" + ("" if exp["acceptance"] else " (none)"))
    for criterion in exp["acceptance"]:
        print(f"  - {criterion['expr']}" + (f"  — {criterion['prose']}" if criterion["prose"] else ""))
    print(f"workload: recipe {exp['workload_recipe']}, source hash {exp['workload_hash']}")
    print(f"spec: sha256 {exp['spec_hash']}")
    baseline = exp["baseline_candidate_id"]
    print(f"baseline: {'candidate ' + str(baseline) if baseline is not None else '(none yet)'}")
    print(f"limitations: {exp['limitations'] or '(none recorded)'}")
    print(f"open questions: {exp['open_questions'] or '(none recorded)'}")
    counts = cands["status"].fillna("not run").value_counts()
    print(f"candidates: {len(cands)}" + (" (" + ", ".join(f"{n} {s}" for s, n in counts.items()) + ")"
                                           if len(cands) else ""))  # fmt: skip
    if len(cands):
        shown = cands.head(limit)
        view = _pandas().DataFrame({
            "id": shown["id"],
            "origin": shown["origin"] + shown["is_baseline"].map({True: "*", False: ""}),
            "stage": shown["stage"].fillna(""),
            "status": shown["status"].fillna("not run"),
            "changes": shown["diff"].map(_changes),
            "reason": shown["reason"].map(lambda r: _one_line(r, 50)),
        })  # fmt: skip
        print(_table(view))
        if len(cands) > limit:
            print(f"… {len(cands) - limit} more (--limit N shows more; `dse export` has them all)")
    print("decisions:" + ("" if len(decisions) else " (none yet)"))
    for d in decisions.to_dict("records"):
        about = "" if _pandas().isna(d["candidate_id"]) else f" candidate {d['candidate_id']}"
        print(f"  #{d['id']} {_when(d['created_at'])} {d['verdict']}{about} by {d['author']}: "
              f"{_one_line(d['rationale'], 100)} (evidence runs {d['evidence']})")  # fmt: skip
    if len(artifacts):
        print(f"artifacts: {len(artifacts)} (in {store.evidence_dir})")


def _changes(diff_json: str) -> str:
    diff = json.loads(diff_json) if diff_json else {}
    if not diff:
        return "(baseline)"
    return _one_line(", ".join(f"{k.split('.', 1)[-1]}={v[1]}" for k, v in diff.items()), 50)


def _show_candidate(store, ident: int) -> None:
    cand = store.candidate(ident)
    runs = store.runs(candidate=ident)
    print(f"candidate {cand['id']} of experiment '{cand['experiment']}' (id {cand['experiment_id']})"
          f"{'  [baseline]' if cand['is_baseline'] else ''}")  # fmt: skip
    print(f"origin: {cand['origin']}   hash: {cand['hash']}   created {_when(cand['created_at'])}")
    if cand["diff"]:
        print("difference from the baseline:")
        for path, (before, after) in cand["diff"].items():
            print(f"  {path}: {json.dumps(before)} -> {json.dumps(after)}")
    else:
        print("difference from the baseline: none")
    print("config:  " + json.dumps(cand["config"], sort_keys=True))
    print("mapping: " + json.dumps(cand["mapping"], sort_keys=True))
    print("runs:" + ("" if len(runs) else " (none yet)"))
    if len(runs):
        view = _pandas().DataFrame({
            "id": runs["id"], "stage": runs["stage"], "status": runs["status"],
            "started": runs["started_at"].map(_when), "host": runs["host"].fillna(""),
            "git": [_git(c, d) for c, d in zip(runs["git_commit"], runs["git_dirty"])],
            "model": runs["model_version"], "emulator": runs["emulator_version"].fillna(""),
            "reason / error": [_one_line(r if isinstance(r, str) else e, 50)
                               for r, e in zip(runs["reason"], runs["error"])],
        })  # fmt: skip
        print(_table(view))
    metrics = store.metrics(cand["experiment_id"])
    metrics = metrics[(metrics["candidate_id"] == ident) & (metrics["scope"] == "total")]
    if len(metrics):
        latest = metrics.groupby("kind")["run_id"].transform("max")
        metrics = metrics[metrics["run_id"] == latest]
        print("metrics (latest run of each kind, scope total):")
        view = metrics[["kind", "name", "value", "unit", "run_id"]].copy()
        view["value"] = view["value"].map(_num)
        print(_table(view))
    artifacts = store.artifacts(cand["experiment_id"])
    artifacts = artifacts[artifacts["candidate_id"] == ident]
    if len(artifacts):
        print("artifacts:")
        print(_table(artifacts[["id", "run_id", "role", "size", "name", "path"]], 80))
    decisions = store.decisions(cand["experiment_id"])
    for d in decisions[decisions["candidate_id"] == ident].to_dict("records"):
        print(f"decision #{d['id']} {_when(d['created_at'])}: {d['verdict']} by {d['author']}: "
              f"{_one_line(d['rationale'], 100)}")  # fmt: skip


def _git(commit, dirty) -> str:
    if not isinstance(commit, str):
        return ""
    return commit[:10] + ("+dirty" if dirty is True else "")


def _show_run(store, ident: int) -> None:
    run = store.run(ident)
    print(f"run {run['id']}: {run['stage']} of candidate {run['candidate_id']} "
          f"(experiment {run['experiment_id']}), status {run['status']}")  # fmt: skip
    print(f"started {_when(run['started_at'])}, finished {_when(run['finished_at'])}, "
          f"last heartbeat {_when(run['heartbeat_at'])}")  # fmt: skip
    print(f"host {run['host']} pid {run['pid']}; git {_git(run['git_commit'], run['git_dirty']) or '—'}")
    print(f"command: {run['command']}")
    print(f"seed: {run['seed']}   model version: {run['model_version'] or '—'}   "
          f"emulator version: {run['emulator_version'] or '—'}")  # fmt: skip
    print("versions: " + json.dumps(run["versions"], sort_keys=True))
    for field in ("reason", "error"):
        if run[field]:
            print(f"{field}: {run[field]}")
    if run["traceback"]:
        print("traceback:\n" + run["traceback"].rstrip())
    metrics = run["metrics"]
    if len(metrics):
        view = metrics.copy()
        view["value"] = view["value"].map(_num)
        print(f"metrics ({len(view)}):")
        print(_table(view))
    artifacts = store.artifacts(run=ident)
    if len(artifacts):
        print("artifacts:")
        print(_table(artifacts[["id", "role", "media_type", "size", "name", "path"]], 80))


# ---- dse compare --------------------------------------------------------------------------


def cmd_compare(args) -> int:
    from ..records import METRIC_SCOPES

    a, b = _candidate_id(args.a, "A"), _candidate_id(args.b, "B")
    if args.scope not in METRIC_SCOPES:
        raise InputError("dse compare", "--scope", args.scope, ", ".join(METRIC_SCOPES))
    with open_store(args.db) as store:
        cand_a, cand_b = store.candidate(a), store.candidate(b)
        fields = store.compare(a, b)
        metrics = store.compare_metrics(a, b, scope=args.scope)
        exp_a = store.experiment(cand_a["experiment_id"])
        exp_b = store.experiment(cand_b["experiment_id"])
    print(f"A = candidate {a} ({cand_a['experiment']}), B = candidate {b} ({cand_b['experiment']})")
    if exp_a["id"] != exp_b["id"]:
        same = "the same" if exp_a["workload_hash"] == exp_b["workload_hash"] else "DIFFERENT"
        print(f"note: different experiments; {same} workload "
              f"({exp_a['workload_recipe']} {exp_a['workload_hash'][:12]} vs "
              f"{exp_b['workload_recipe']} {exp_b['workload_hash'][:12]})")  # fmt: skip
    design = fields[~fields["field"].str.contains(":", regex=False)]
    print()
    if design.empty:
        print("config and mapping: identical")
    else:
        print("config and mapping fields that differ:")
        view = design.copy()
        view["a"] = view["a"].map(json.dumps)
        view["b"] = view["b"].map(json.dumps)
        print(_table(view.rename(columns={"a": "A", "b": "B"})))
    print()
    if metrics.empty:
        print(f"metrics: neither candidate has {args.scope} metrics")
        return 0
    changed = metrics[~((metrics["a"] == metrics["b"]) | (metrics["a"].isna() & metrics["b"].isna()))]
    shown = metrics if args.all_metrics else changed
    title = "metrics" if args.all_metrics else "metrics that differ"
    print(f"{title} (B - A; each evidence kind apart, from each side's latest run of that kind):")
    if shown.empty:
        print("  (none)")
    else:
        view = shown[["kind", "name", "unit"]].copy()
        if args.scope != "total":
            view.insert(3, "key", shown["scope_key"])
        view["A"] = shown["a"].map(_num)
        view["B"] = shown["b"].map(_num)
        view["delta"] = shown["delta"].map(_num)
        view["B/A"] = shown["ratio"].map(lambda r: "—" if _pandas().isna(r) else f"{r:.4f}")
        print(_table(view))
    hidden = len(metrics) - len(shown)
    if hidden:
        print(f"({hidden} equal metrics not shown; --all-metrics shows them)")
    for kind, group in metrics.groupby("kind", sort=False):
        for column, label in (("model_version", "model"), ("emulator_version", "emulator")):
            left = set(group[f"{column}_a"].dropna()) - {""}
            right = set(group[f"{column}_b"].dropna()) - {""}
            if left and right and left != right:
                print(f"note: {kind} figures come from {label} versions "
                      f"{', '.join(sorted(left))} (A) and {', '.join(sorted(right))} (B)")  # fmt: skip
    return 0


# ---- dse decide ---------------------------------------------------------------------------


def cmd_decide(args) -> int:
    accept = args.accept is not None
    candidate = _candidate_id(args.accept if accept else args.reject, "--accept" if accept else "--reject")
    author = args.author or os.environ.get("DSE_AUTHOR") or _user()
    with open_store(args.db) as store:
        decision_id = store.decide(args.experiment, candidate, accept, args.why, author)
        decision = store.decisions(args.experiment).set_index("id").loc[decision_id]
    print(f"decision {decision_id}: {decision['verdict']} candidate {candidate} of experiment "
          f"'{decision['experiment']}' by {author} (evidence runs {decision['evidence']})")  # fmt: skip
    return 0


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no login name (a container): still a decision
        return "unknown"


# ---- dse export ---------------------------------------------------------------------------


def cmd_export(args) -> int:
    from ..records.export import EXPORT_FORMATS, export_experiment

    if args.format not in EXPORT_FORMATS:
        raise InputError("dse export", "--format", args.format, ", ".join(EXPORT_FORMATS))
    with open_store(args.db) as store:
        name = store.experiment(args.experiment)["name"]
        out = args.out or os.path.join("exports", re.sub(r"[^A-Za-z0-9_.-]+", "_", name))
        paths = export_experiment(store, args.experiment, out, args.format)
    for path in paths:
        print(path)
    return 0


def register(sub) -> None:
    hist = sub.add_parser("history", help="experiments, hypothesis status, decisions and run counts")
    add_db_argument(hist)
    hist.add_argument("--decisions", action="store_true", help="also list every decision")
    hist.set_defaults(func=cmd_history)

    show = sub.add_parser("show", help="one experiment, candidate (c<ID>) or run (r<ID>) in full")
    show.add_argument("id", metavar="ID", help=_SHOW_ALLOWED)
    add_db_argument(show)
    show.add_argument("--limit", type=int, default=25, help="candidates listed for an experiment (25)")
    show.set_defaults(func=cmd_show)

    comp = sub.add_parser("compare", help="two candidates: the fields that differ, metric deltas by kind")
    comp.add_argument("a", metavar="A", help="candidate id")
    comp.add_argument("b", metavar="B", help="candidate id")
    add_db_argument(comp)
    comp.add_argument("--all-metrics", action="store_true", help="also list the metrics that are equal")
    comp.add_argument("--scope", default="total", help="metric scope: total (default), op, core, ball, bank")
    comp.set_defaults(func=cmd_compare)

    dec = sub.add_parser("decide", help="accept or reject a candidate of an experiment, with the reason")
    dec.add_argument("experiment", metavar="EXPERIMENT", help="experiment name or id")
    which = dec.add_mutually_exclusive_group(required=True)
    which.add_argument("--accept", metavar="CANDIDATE", help="candidate id to accept")
    which.add_argument("--reject", metavar="CANDIDATE", help="candidate id to reject")
    dec.add_argument("--why", required=True, help="the rationale, recorded with the decision")
    dec.add_argument("--author", help="who decides (default $DSE_AUTHOR, else the login name)")
    add_db_argument(dec)
    dec.set_defaults(func=cmd_decide)

    exp = sub.add_parser("export", help="an experiment's records as CSV or Parquet files, one per table")
    exp.add_argument("experiment", metavar="EXPERIMENT", help="experiment name or id")
    add_db_argument(exp)
    exp.add_argument("--format", default="csv", help="csv (default) or parquet")
    exp.add_argument("--out", help="output folder (default exports/<experiment name>/)")
    exp.set_defaults(func=cmd_export)
