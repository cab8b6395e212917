"""Record-store commands: `dse history`, `dse show`, `dse compare`, `dse decide`, `dse export`."""

from __future__ import annotations

import json
import math
import os
import re

from ..errors import InputError, close_matches
from ..records import light
from ..records.blobs import EvidenceCheck
from ..records.outcomes import experiment_status, outcome, spelled_counts
from .common import _missing, _user, _when, add_db_argument, default_db, evidence_verdict, open_store

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


def _text_table(columns: dict[str, list]) -> str:
    """What `_table` prints for a frame of these columns (whole numbers, text, None), without
    pandas: DataFrame.to_string(index=False) right-justifies every cell and header to its
    column's width, one space apart, a number column's header after a space (its sign's
    place), and escapes tabs and line breaks (and cuts no cell: to_string ignores
    display.max_colwidth)."""
    names = list(columns)
    if not names or not len(columns[names[0]]):
        return f"Empty DataFrame\nColumns: [{', '.join(names)}]\nIndex: []"
    cells = [[" " + name if all(type(v) is int for v in columns[name]) else name, *(_cell(v) for v in columns[name])]
             for name in names]
    widths = [max(map(len, column)) for column in cells]
    return "\n".join(" ".join(column[i].rjust(w) for column, w in zip(cells, widths)) for i in range(len(cells[0])))


def _cell(value) -> str:
    if isinstance(value, float):
        raise TypeError("_text_table formats whole numbers and text only (pandas formats floats its own way)")
    return str(value).replace("\t", "\\t").replace("\r", "\\r").replace("\n", "\\n")


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


# ---- dse history --------------------------------------------------------------------------


def cmd_history(args) -> int:
    # Plain rows, no pandas for the table; a SQLite store at the schema head is read with
    # the standard library (the Store's own SQL), without SQLAlchemy: `dse history` answers at once.
    with light.open_light(args.db or default_db()) or open_store(args.db) as store:
        exps = store.experiment_summaries()
        decisions = store.decision_rows() if exps else []
        notes = store.notes() if exps else []
        links = store.links() if exps else []
    if not exps:
        print("no experiments yet")
        return 0
    header = ["id", "name", "status", "proposed", "candidates", "ok", "infeasible", "failed", "crashed",
              "running", "emulated", "decisions", "notes", "builds on", "hypothesis"]  # fmt: skip
    builds_on: dict[int, list[str]] = {}
    for link in links:
        builds_on.setdefault(link["experiment_id"], []).append(f"{link['relation']} {link['other_id']}")
    rows = []
    for e in exps:
        rows.append([e["id"], e["name"], experiment_status(e["status"], e["n_candidates"]), e["proposed_verdict"] or "—", e["n_candidates"], e["n_ok"],
                     e["n_infeasible"], e["n_failed"], e["n_crashed"], e["n_running"], e["n_emulated"],
                     e["n_decisions"], e["n_notes"], ", ".join(builds_on.get(e["id"], [])) or "—",
                     _one_line(e["hypothesis"], 60)])  # fmt: skip
    print(_plain_table(header, rows, left={"name", "status", "proposed", "builds on", "hypothesis"}))
    print("(status: of the hypothesis, set by people's decisions; proposed: the sweep's verdict; "
          "ok … running: candidates by outcome)")
    events = [(d["created_at"], "decision" if d["kind"] == "decision" else "proposal", d)
              for d in decisions if args.decisions or d["kind"] == "decision"]
    events += [(n["created_at"], "note", n) for n in notes]
    events += [(link["created_at"], "link", link) for link in links]
    print()
    if not events:
        print("no decisions or notes yet" + ("" if args.decisions else " (--decisions also lists the sweeps' proposals)"))
        return 0
    print("decisions, notes and experiments built on others, oldest first:")
    for when, what, item in sorted(events, key=lambda e: (e[0], e[1])):
        if what == "link":
            print(f"  {_when(when)}  {item['experiment']}: {item['relation']} experiment {item['other_id']} "
                  f"'{item['other']}': {_one_line(item['reason'], 90)}")
        elif what == "note":
            print(f"  {_when(when)}  {item['experiment']}: {item['kind'].replace('_', ' ')} by {item['author']}: "
                  f"{_one_line(item['text'], 100)}")
        else:
            print(f"  {_when(when)}  {item['experiment']}: {_decision_line(item)}")
    return 0


def _decision_line(d: dict) -> str:
    """One decision or proposal on one line: verdict, candidate, author, reason, override."""
    about = ""
    if not _missing(d["candidate_id"]):
        about = f" c{d['candidate_id']}"
        if not _missing(d.get("candidate_experiment_id")) and d["candidate_experiment_id"] != d["experiment_id"]:
            about += f" (of experiment {d['candidate_experiment_id']})"
    label = "proposed " if d["kind"] == "proposal" else ""
    override = d.get("override")
    override = f" [overriding the acceptance test: {_one_line(override, 60)}]" if isinstance(override, str) else ""
    return f"#{d['id']} {label}{d['verdict']}{about} by {d['author']}: {_one_line(d['rationale'], 90)}{override}"


def _evidence_line(d: dict) -> str:
    """"evidence kinds: analytical model; hardware may differ: ..." (`dse.runner.caveats`)."""
    from ..runner.caveats import hardware_caveat, kinds_text

    caveat = hardware_caveat(d.get("evidence_kinds"))
    return f"evidence kinds: {kinds_text(d.get('evidence_kinds'))}" + (f"; {caveat}" if caveat else "")


def _plain_table(header: list[str], rows: list[list], left: set[str] = frozenset()) -> str:
    cells = [header] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for row in cells:
        parts = [v.ljust(w) if h in left else v.rjust(w) for v, w, h in zip(row, widths, header)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


# ---- dse show -----------------------------------------------------------------------------


def _prefixed(text: str) -> tuple[str, int] | None:
    """("candidate" | "run" | "experiment", id) for c<ID>, r<ID>, e<ID> and their long forms, else None."""
    match = _PREFIXED.fullmatch(text.strip())
    if not match:
        return None
    prefix = match.group(1).lower()
    kind = {"c": "candidate", "cand": "candidate", "r": "run", "e": "experiment",
            "exp": "experiment"}.get(prefix, prefix)  # fmt: skip
    return kind, int(match.group(2))


def _resolve(store, text: str) -> tuple[str, int]:
    from ..records import RecordNotFound

    try:  # an experiment's own name wins over the c<ID>/r<ID> shorthands
        return "experiment", int(store.experiment(text)["id"])
    except RecordNotFound:
        pass
    found = _prefixed(text)
    if found:
        return found
    names = [e["name"] for e in store.experiment_summaries()]
    known = f"; experiments: {', '.join(names[:12])}" + (" …" if len(names) > 12 else "") if names else ""
    raise InputError(store.url, "ID", text, _SHOW_ALLOWED + known, close_matches(text, names))


def cmd_show(args) -> int:
    if args.limit < 0:
        raise InputError("dse show", "--limit", args.limit, "a whole number >= 0 (candidates listed)")
    if args.program or args.banks:
        return _show_emitted(args)
    # A store at the schema head: read with its plain driver (the Store's own SQL and
    # errors), no SQLAlchemy or pandas; a store the Store's open would refuse, upgrade or
    # reap is the Store's to answer.
    with light.open_light(args.db or default_db()) or open_store(args.db) as store:
        kind, ident = _resolve(store, args.id)
        if kind == "experiment":
            check = _show_experiment(store, ident, args.limit)
        elif kind == "candidate":
            check = _show_candidate(store, store.candidate(ident))
        else:
            check = _show_run(store, store.run_row(ident))
    return evidence_verdict(check)


def _show_emitted(args) -> int:
    """`dse show c<ID> --program / --banks`: the candidate's program emitted again as its
    emulator stage emits it (`dse.runner.replay.emit_recorded`; this imports torch and the
    lowering), checked against the program digest its emulator run recorded."""
    from ..lower import Infeasible
    from ..lower.banks import lifetimes_text
    from ..lower.listing import listing_text, program_digest
    from ..runner.replay import emit_recorded, recorded_digests

    flag = "--program" if args.program else "--banks"
    with open_store(args.db) as store:
        kind, ident = _resolve(store, args.id)
        if kind != "candidate":
            raise InputError(store.url, "ID", args.id, f"a candidate (c<ID>) with {flag}")
        cand = store.candidate(ident)
        try:
            emitted = emit_recorded(store, cand)
        except Infeasible as exc:
            raise InputError(store.url, flag, f"c{ident}", f"a feasible candidate (c{ident}: {exc})") from None
        run_id, recorded = recorded_digests(store, ident)
    digest = program_digest(emitted.program)
    print(f"candidate {ident}: {emitted.program.name}; {len(emitted.program.cores)} core(s), "
          f"{emitted.program.n_instructions:,} instructions; program sha256 {digest}")
    if recorded is None:
        print("(no emulator run of this candidate recorded its program's digest)")
    elif recorded["digests"]["program_sha256"] == digest:
        print(f"the program emulator run r{run_id} ran (its recorded sha256)")
    else:
        print(f"NOT the program emulator run r{run_id} ran (it recorded sha256 "
              f"{recorded['digests']['program_sha256']}): the recipe, the lowering or dse changed since")
    if args.program:
        print(listing_text(emitted.listing()))
    else:
        print("bank lifetimes (virtual banks in program order: # from MSET to free; in = loaded from, "
              "out = stored to):")
        print(lifetimes_text(emitted.bank_lifetimes()))
    return 0


def _show_experiment(store, ident: int, limit: int) -> EvidenceCheck:
    exp = store.experiment(ident)
    # The first `limit` candidates and the counts by status: not every candidate's row.
    cands = store.candidate_rows(exp["id"], limit=limit)
    counts = store.latest_status_counts(exp["id"])
    n_candidates = sum(n for _, n in counts)
    decisions = store.decision_rows(exp["id"])
    artifacts = store.artifact_rows(exp["id"])
    print(f"experiment {exp['id']} '{exp['name']}'  hypothesis {experiment_status(exp['status'], n_candidates)}  "
          f"(created {_when(exp['created_at'])})")  # fmt: skip
    print(f"hypothesis: {exp['hypothesis']}")
    print("acceptance:" + ("" if exp["acceptance"] else " (none)"))
    for criterion in exp["acceptance"]:
        print(f"  - {criterion['expr']}" + (f"  — {criterion['prose']}" if criterion["prose"] else ""))
    parts = exp.get("workload")
    if parts:
        params = ", ".join(f"{k}={v}" for k, v in sorted(parts["params"].items()))
        steps = ", ".join(s["name"] for s in parts["steps"]) or "none"
        print(f"workload: recipe {exp['workload_recipe']} ({params}; steps {steps}; torch {parts['torch_version']}), "
              f"identity {exp['workload_hash']}")
        stages = parts.get("stages") or []
        if stages:
            print(f"  stage {stages[0]['role']}: the recipe above")
        for stage in stages[1:]:  # a staged workload: its other stages, by role (the first is the recipe above)
            sparams = ", ".join(f"{k}={v}" for k, v in sorted(stage["params"].items()))
            print(f"  stage {stage['role']}: recipe {stage.get('recipe', '?')} ({sparams}; steps "
                  f"{', '.join(s['name'] for s in stage['steps']) or 'none'})")
    else:  # recorded before 0009: the identity was model.py's hash alone
        print(f"workload: recipe {exp['workload_recipe']}, source hash {exp['workload_hash']}")
    print(f"spec: sha256 {exp['spec_hash']}")
    for link in store.links(exp["id"]):
        if link["experiment_id"] == exp["id"]:
            print(f"{link['relation']} experiment {link['other_id']} '{link['other']}': {link['reason']}")
        else:
            print(f"{'followed' if link['relation'] == 'follows' else 'reopened'} by experiment "
                  f"{link['experiment_id']} '{link['experiment']}': {link['reason']}")
    baseline = exp["baseline_candidate_id"]
    print(f"baseline: {'candidate ' + str(baseline) if baseline is not None else '(none yet)'}")
    # The answer at a glance: the one judgement of acceptance (the sweep's, `dse decide`'s,
    # the report's, the UI's), over every evidence kind its clauses name.
    from ..runner.acceptance import headline, judge_experiment, outcome_mark

    judgement = judge_experiment(store, exp)
    top = headline(judgement, exp, decisions)
    print(f"answer: {top.lines[2]}")
    print(f"  {top.proposed}")
    print(f"  {top.decided}")
    print(f"  acceptance (every evidence kind its clauses name): {top.counts}"
          + (f"; passing: {', '.join(f'c{c}' for c in judgement.passing_ids)}" if judgement.passing_ids else ""))
    _print_leaders(judgement, exp, top.accepted)
    notes = store.notes(exp["id"])
    for kind, title in (("limitation", "limitations"), ("open_question", "open questions"), ("note", "notes")):
        spec_text = exp.get(f"{kind}s", "") if kind != "note" else ""
        added = [n for n in notes if n["kind"] == kind]
        if not spec_text and not added and kind == "note":
            continue
        print(f"{title}:" + (f" {_one_line(spec_text, 200)}" if spec_text else " (none in the spec)" if kind != "note" else ""))
        for n in added:
            print(f"  + {_when(n['created_at'])} by {n['author']}: {n['text']}")
    from ..records.lessons import lessons_of

    found = lessons_of(store.notes(), exp["id"])  # each with every experiment it came from
    if found:
        from .lessons import lesson_lines

        print("lessons and methods (dse lesson):")
        for line in lesson_lines(found):
            print(f"  + {line}")
    print(f"candidates: {n_candidates}" + (f" ({spelled_counts(counts)})"
                                             if n_candidates else ""))  # fmt: skip
    # Each reason a candidate was not evaluated to the end, once, with its count; the
    # table's rows refer to these lines by number.
    from ..runner.reasons import reason_lines, reason_ref, reason_refs

    groups = store.reason_groups(exp["id"])
    refs = reason_refs(groups)
    for line in reason_lines(groups):
        print(f"  {line}")
    if n_candidates:
        # Plain rows, printed as pandas would print them (`_text_table`), without pandas.
        baseline = exp["baseline_candidate_id"]
        view = {
            "id": [c["id"] for c in cands],
            "origin": [c["origin"] + ("*" if c["id"] == baseline else "") for c in cands],
            "stage": ["" if c["stage"] is None else c["stage"] for c in cands],
            "status": [outcome(c["status"], c["reason"]) for c in cands],  # the counts' classification
            "acceptance": [outcome_mark(judgement.outcome(c["id"])) for c in cands],
            "marks": [", ".join(m for m, on in (("★ best", c["id"] == judgement.best),
                                                 ("◇ accepted", c["id"] in top.accepted)) if on) for c in cands],
            "changes": [_changes(c["diff"]) for c in cands],
            "reason": [reason_ref(refs, c["status"], c["reason"]) or _one_line(c["reason"], 50) for c in cands],
        }
        if any(c["why"] is not None for c in cands):  # hand-picked candidates say why they are here
            view["why (hand-picked)"] = [_one_line(c["why"], 50) for c in cands]
        print(_text_table(view))
        if n_candidates > limit:
            print(f"… {n_candidates - limit} more (--limit N shows more; `dse export` has them all)")
    print("decisions and proposals:" + ("" if len(decisions) else " (none yet)"))
    for d in decisions:
        print(f"  {_when(d['created_at'])} {_decision_line(d)} (evidence runs {d['evidence']})")
        print(f"      {_evidence_line(d)}")
    check = store.check_evidence(exp["id"])
    if artifacts:
        print(f"artifacts: {len(artifacts)} (in {store.evidence_dir}; a run's: dse show r<ID>; "
              "one: dse evidence get ID); " + check.summary())
        own = [a for a in artifacts if a["run_id"] is None]
        if own:
            view = {column: [a[column] for a in own] for column in ("id", "role", "size", "name")}
            view["evidence"] = [check.state_of(a["sha256"]) for a in own]
            print(_text_table(view))
    _print_bad_evidence(check)
    return check


def _print_leaders(judgement, exp: dict, accepted) -> None:
    """The baseline and the best candidates with their key figures and ratios to the
    baseline (`dse.runner.leaders`, from the judgement above): numbers without `dse compare`."""
    from ..runner.acceptance import outcome_mark
    from ..runner.leaders import leaders

    top = leaders(judgement, exp, accepted)
    if len(top.rows) < 2 or not top.figures:
        return
    print("key figures (in brackets: the candidate's over the baseline's; each evidence kind apart)"
          + ("" if top.passing else "; none passes: the feasible candidates best by the first objective") + ":")
    marks = {"baseline": "baseline", "best": "★ best", "passes": "", "accepted": "◇ accepted", "feasible": ""}
    view = {"id": [f"c{r.candidate_id}" for r in top.rows],
            "": [marks[r.role] + (" ◇ accepted" if r.role != "accepted" and r.candidate_id in accepted else "")
                 for r in top.rows],
            "acceptance": ["—" if r.role == "baseline" else outcome_mark(r.outcome) for r in top.rows]}
    for k, figure in enumerate(top.figures):
        view[figure.label] = [_num(r.values[k]) + ("" if math.isnan(r.ratios[k]) else f" ({r.ratios[k]:.3g}x)")
                              for r in top.rows]
    print(_text_table(view))
    if top.more:
        print(f"  … {top.more} more {'passing' if top.passing else 'feasible'} (dse report, or the UI, has them all)")


def _changes(diff_json: str) -> str:
    diff = json.loads(diff_json) if diff_json else {}
    if not diff:
        return "(baseline)"
    return _one_line(", ".join(f"{k.split('.', 1)[-1]}={v[1]}" for k, v in diff.items()), 50)


def reused_lines(runs: list[dict]) -> list[str]:
    """Per stage, the candidate's latest run's evidence when it is reused from an earlier
    experiment (`runs`: `Store.run_rows`): "analytical evidence reused from ..."."""
    latest = {r["stage"]: r for r in runs}  # by id: the last of a stage wins
    return [f"{stage} evidence {r['reused_from']}" for stage, r in latest.items() if r["reused_from"]]


def _show_candidate(store, cand: dict) -> EvidenceCheck:
    """A candidate (`store.candidate`'s dict) in full: plain rows, printed as pandas would
    print them (`_text_table`), without pandas."""
    ident = cand["id"]
    runs = store.run_rows(ident)
    print(f"candidate {cand['id']} of experiment '{cand['experiment']}' (id {cand['experiment_id']})"
          f"{'  [baseline]' if cand['is_baseline'] else ''}")  # fmt: skip
    print(f"origin: {cand['origin']}   hash: {cand['hash']}   created {_when(cand['created_at'])}")
    if cand.get("why"):
        print(f"why (hand-picked): {cand['why']}")
    if cand.get("notes"):
        print(f"notes: {cand['notes']}")
    if cand["diff"]:
        print("difference from the baseline:")
        for path, (before, after) in cand["diff"].items():
            print(f"  {path}: {json.dumps(before)} -> {json.dumps(after)}")
    else:
        print("difference from the baseline: none")
    from ..config_tree import tree_text

    for section in ("config", "mapping"):  # readable trees (the UI's pages show the same rows)
        print(f"{section}:" + ("\n" + tree_text(cand[section], depth=1) if cand[section] else " {}"))
    print("runs:" + ("" if runs else " (none yet)"))
    if runs:
        print(_text_table({
            "id": [r["id"] for r in runs], "stage": [r["stage"] for r in runs], "status": [r["status"] for r in runs],
            "started": [_when(r["started_at"]) for r in runs], "host": [r["host"] or "" for r in runs],
            "git": [_git(r["git_commit"], r["git_dirty"]) for r in runs], "model": [r["model_version"] for r in runs],
            "emulator": [r["emulator_version"] or "" for r in runs],
            "reason / error": [_one_line(r["reason"] if isinstance(r["reason"], str) else r["error"], 50)
                               for r in runs],
        }))  # fmt: skip
        for r in runs:  # evidence linked from an earlier experiment, not evaluated again (dse.records.reuse)
            if r["reused_from"]:
                print(f"  run {r['id']} ({r['stage']}): {r['reused_from']}")
    metrics = store.total_metric_rows(ident)
    if metrics:
        print("metrics (latest run of each kind, scope total):")
        print(_text_table({"kind": [m["kind"] for m in metrics], "name": [m["name"] for m in metrics],
                           "value": [_num(m["value"]) for m in metrics], "unit": [m["unit"] for m in metrics],
                           "run_id": [m["run_id"] for m in metrics]}))  # fmt: skip
    artifacts = store.artifact_rows(candidate=ident)  # a reused run's: the earlier run's files
    check = store.check_evidence(candidate=ident)
    if artifacts:
        print("artifacts: " + check.summary())
        print(_artifact_table(store, artifacts, ("id", "run_id", "role", "size", "name"), check))
    for d in store.decision_rows(cand["experiment_id"]):
        if d["candidate_id"] == ident:
            print(f"{'proposal' if d['kind'] == 'proposal' else 'decision'} #{d['id']} {_when(d['created_at'])}: "
                  f"{d['verdict']} by {d['author']}: {_one_line(d['rationale'], 100)}")  # fmt: skip
            print(f"  {_evidence_line(d)}")
    _print_bad_evidence(check)
    return check


def _artifact_table(store, artifacts: list[dict], columns: tuple[str, ...], check: EvidenceCheck) -> str:
    """Evidence files' rows with their paths and what each file is (ok, missing, altered, refused)."""
    view = {column: [a[column] for a in artifacts] for column in columns}
    view["evidence"] = [check.state_of(a["sha256"]) for a in artifacts]
    view["path"] = [None if store.evidence_dir is None else str(store.artifact_path(a["sha256"])) for a in artifacts]
    return _text_table(view)


def _print_bad_evidence(check: EvidenceCheck) -> None:
    """Each evidence file shown that is not what its row records, one line each."""
    for line in check.lines():
        print(f"  ! {line}")


def _git(commit, dirty) -> str:
    if not isinstance(commit, str):
        return ""
    return commit[:10] + ("+dirty" if dirty is True else "")


def _show_run(store, run: dict) -> EvidenceCheck:
    """A run (`store.run_row`'s dict) in full: plain rows, printed as pandas would print them."""
    print(f"run {run['id']}: {run['stage']} of candidate {run['candidate_id']} "
          f"(experiment {run['experiment_id']}), status {run['status']}")  # fmt: skip
    print(f"started {_when(run['started_at'])}, finished {_when(run['finished_at'])}, "
          f"last heartbeat {_when(run['heartbeat_at'])}")  # fmt: skip
    print(f"host {run['host']} pid {run['pid']}; git {_git(run['git_commit'], run['git_dirty']) or '—'}")
    print(f"command: {run['command']}")
    print(f"seed: {run['seed']}   model version: {run['model_version'] or '—'}   "
          f"emulator version: {run['emulator_version'] or '—'}")  # fmt: skip
    print("versions: " + json.dumps(run["versions"], sort_keys=True))
    if run.get("reused_from"):
        print(f"{run['reused_from']}: its evidence (status, reason, metrics, files) is that run's, not evaluated again")
    for field in ("reason", "error"):
        if run[field]:
            print(f"{field}: {run[field]}")
    if run["traceback"]:
        print("traceback:\n" + run["traceback"].rstrip())
    metrics = store.run_metric_rows(run["id"])
    if metrics:
        print(f"metrics ({len(metrics)}):")
        view = {column: [m[column] for m in metrics] for column in ("kind", "name", "value", "unit", "scope",
                                                                     "scope_key")}  # fmt: skip
        view["value"] = [_num(v) for v in view["value"]]
        print(_text_table(view))
    artifacts = store.artifact_rows(run=run["id"])
    check = store.check_evidence(run=run["id"])
    if artifacts:
        print("artifacts: " + check.summary())
        print(_artifact_table(store, artifacts, ("id", "role", "media_type", "size", "name"), check))
    _print_bad_evidence(check)
    return check


# ---- dse compare --------------------------------------------------------------------------


def cmd_compare(args) -> int:
    from ..records import METRIC_SCOPES

    ids = [_candidate_id(c, "CANDIDATE") for c in args.candidates]
    if len(ids) < 2:
        raise InputError("dse compare", "CANDIDATE", args.candidates, "at least two candidate ids")
    if len(set(ids)) != len(ids):
        raise InputError("dse compare", "CANDIDATE", args.candidates, "distinct candidate ids")
    if args.scope not in METRIC_SCOPES:
        raise InputError("dse compare", "--scope", args.scope, ", ".join(METRIC_SCOPES))
    if len(ids) > 2:
        return _compare_many(args, ids)
    a, b = ids
    with open_store(args.db) as store:
        cand_a, cand_b = store.candidate(a), store.candidate(b)
        fields = store.compare(a, b)
        metrics = _scoped_metrics(store, a, b, args.scope)
        exp_a = store.experiment(cand_a["experiment_id"])
        exp_b = store.experiment(cand_b["experiment_id"])
        runs_a, runs_b = store.run_rows(a), store.run_rows(b)
    print(f"A = candidate {a} ({cand_a['experiment']}), B = candidate {b} ({cand_b['experiment']})")
    work_a, work_b = _work_of(cand_a, exp_a), _work_of(cand_b, exp_b)
    print("submitted work: " + (f"identical ({work_a})" if work_a == work_b else
                                f"DIFFERENT (A: {work_a}; B: {work_b}): the figures are not of the same work"))
    if exp_a["id"] != exp_b["id"]:
        same = "the same" if exp_a["workload_hash"] == exp_b["workload_hash"] else "DIFFERENT"
        print(f"note: different experiments; {same} workload "
              f"({exp_a['workload_recipe']} {exp_a['workload_hash'][:12]} vs "
              f"{exp_b['workload_recipe']} {exp_b['workload_hash'][:12]})")  # fmt: skip
    for side, ident, rows in (("A", a, runs_a), ("B", b, runs_b)):
        for line in reused_lines(rows):
            print(f"{side}'s {line}")
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
            view.insert(3, _KEY_HEADER.get(args.scope, "key"), shown["scope_key"])
        view["A"] = shown["a"].map(_num)
        view["B"] = shown["b"].map(_num)
        view["delta"] = shown["delta"].map(_num)
        view["B/A"] = shown["ratio"].map(lambda r: "—" if _pandas().isna(r) else f"{r:.4f}")
        print(_table(view))
    hidden = len(metrics) - len(shown)
    if hidden:
        print(f"({hidden} equal metrics not shown; --all-metrics shows them)")
    if args.scope == "total":
        _print_host_time(metrics, "a", "b", design.empty, ("A", "B"))
    for kind, group in metrics.groupby("kind", sort=False):
        for column, label in (("model_version", "model"), ("emulator_version", "emulator")):
            left = set(group[f"{column}_a"].dropna()) - {""}
            right = set(group[f"{column}_b"].dropna()) - {""}
            if left and right and left != right:
                print(f"note: {kind} figures come from {label} versions "
                      f"{', '.join(sorted(left))} (A) and {', '.join(sorted(right))} (B)")  # fmt: skip
    return 0


# What a scope's key names, as a column heading.
_KEY_HEADER = {"component": "component", "op": "op", "core": "core", "ball": "Ball", "bank": "bank", "dma": "DMA",
               "bus": "bus", "phase": "phase"}
# The key of a by-component metric's total (the recorded total of that metric and kind).
COMPONENT_TOTAL = "(total)"


def _scoped_metrics(store, a: int, b: int, scope: str):
    """`Store.compare_metrics` of a scope; by component (area and energy of `dse.ppa`'s
    components) in `COMPONENTS` order, each metric's recorded total after its components
    (key "(total)"), so the parts read against the whole, kind by kind."""
    metrics = store.compare_metrics(a, b, scope=scope)
    if scope != "component" or metrics.empty:
        return metrics
    pd = _pandas()
    totals = store.compare_metrics(a, b, scope="total")
    pairs = set(zip(metrics["kind"], metrics["name"]))
    totals = totals[[pair in pairs for pair in zip(totals["kind"], totals["name"])]].assign(scope_key=COMPONENT_TOTAL)
    return _component_order(pd.concat([metrics, totals], ignore_index=True))


def _component_order(table):
    """Rows by kind (as compared), metric, then component in `COMPONENTS` order, the total last."""
    from ..ppa.names import COMPONENTS

    rank = {c: i for i, c in enumerate(COMPONENTS)}
    kinds = {k: i for i, k in enumerate(dict.fromkeys(table["kind"]))}
    order = table.assign(_kind=table["kind"].map(kinds),
                         _rank=table["scope_key"].map(lambda k: len(rank) + 1 if k == COMPONENT_TOTAL
                                                      else rank.get(k, len(rank))))
    return order.sort_values(["_kind", "name", "_rank", "scope_key"], kind="stable").drop(
        columns=["_kind", "_rank"]).reset_index(drop=True)


def _work_of(cand: dict, exp: dict) -> str:
    """The work a candidate ran: its experiment's workload identity and, when a workload
    knob set one, its own point (mapping.workload)."""
    point = (cand["mapping"] or {}).get("workload")
    text = f"{exp['workload_recipe']} {exp['workload_hash'][:12]}"
    return text + (" at " + ", ".join(f"{k}={v}" for k, v in sorted(point.items())) if point else "")


def _print_host_time(metrics, a: str, b: str, identical: bool, names: tuple[str, str]) -> None:
    """The host-time line of a comparison: a difference within the repeats' spread (or
    between identical designs) is said to be noise (`dse.runner.noise`)."""
    from ..runner.noise import HOST_TIME, host_time_comparison

    host = metrics[metrics["kind"] == HOST_TIME]
    figures = [{r["name"]: float(r[side]) for r in host.to_dict("records") if r[side] == r[side]} for side in (a, b)]
    said = host_time_comparison(*figures, identical=identical, names=names)
    if said is not None:
        print(f"emulator host time (median): {said.words}")


def _compare_many(args, ids: list[int]) -> int:
    """Three or more candidates, of any experiments: the first is the reference; fields
    that differ anywhere, and each metric (kinds apart) with its ratio to the reference's."""
    pd = _pandas()
    with open_store(args.db) as store:
        cands = [store.candidate(c) for c in ids]
        exps = {c["experiment_id"]: store.experiment(c["experiment_id"]) for c in cands}
        fields = [store.compare(ids[0], other) for other in ids[1:]]
        metrics = [_scoped_metrics(store, ids[0], other, args.scope) for other in ids[1:]]
    names = [f"c{c}" for c in ids]
    for name, cand in zip(names, cands):
        exp = exps[cand["experiment_id"]]
        print(f"{name}: experiment '{exp['name']}', workload {exp['workload_recipe']} {exp['workload_hash'][:12]}")
    workloads = {_work_of(c, exps[c["experiment_id"]]) for c in cands}
    print("workload: " + ("the same for all: identical submitted work" if len(workloads) == 1 else
                          f"DIFFERENT ({len(workloads)} workload identities): their figures are not of the same work"))
    print()
    values: dict[str, dict[str, object]] = {}
    for i, frame in enumerate(fields, start=1):
        for row in frame.to_dict("records"):
            if ":" in row["field"]:
                continue
            values.setdefault(row["field"], {names[0]: row["a"]})[names[i]] = row["b"]
    if not values:
        print("config and mapping: identical")
    else:
        print("config and mapping fields that differ (the reference's value where a candidate has the same):")
        rows = [{"field": f, **{n: json.dumps(v.get(n, v[names[0]])) for n in names}} for f, v in values.items()]
        print(_table(pd.DataFrame(rows)))
    print()
    keys = ["kind", "name", "unit", "scope_key"]
    table = None
    for i, frame in enumerate(metrics, start=1):
        part = frame[keys + ["a", "b"]].rename(columns={"a": names[0], "b": names[i]})
        table = part if table is None else table.merge(part, on=keys + [names[0]], how="outer")
    if table is None or table.empty:
        print(f"metrics: none of the candidates has {args.scope} metrics")
        return 0
    print(f"metrics (each evidence kind apart, from each candidate's latest run of that kind; "
          f"ratios to {names[0]}):")
    if args.scope == "component":
        table = _component_order(table)
    view = table[keys if args.scope != "total" else keys[:3]].copy()
    view = view.rename(columns={"scope_key": _KEY_HEADER.get(args.scope, "scope_key")})
    for n in names:
        view[n] = table[n].map(_num)
    for n in names[1:]:
        ratio = table[n] / table[names[0]].where(table[names[0]] != 0)
        view[f"{n}/{names[0]}"] = ratio.map(lambda r: "—" if pd.isna(r) else f"{r:.4f}")
    print(_table(view))
    if args.scope == "total":
        for i, n in enumerate(names[1:], start=1):
            identical = not any(":" not in f for f in fields[i - 1]["field"])
            _print_host_time(table, names[0], n, identical, (names[0], n))
    return 0


# ---- dse decide ---------------------------------------------------------------------------


def cmd_decide(args) -> int:
    from ..runner.decisions import decide

    if args.refute:
        verdict, candidate = "refuted", None
    else:
        accept = args.accept is not None
        verdict = "accepted" if accept else "rejected"
        candidate = _candidate_id(args.accept if accept else args.reject, "--accept" if accept else "--reject")
    author = args.author if args.author is not None else (os.environ.get("DSE_AUTHOR") or _user())
    with open_store(args.db) as store:
        result = decide(store, args.experiment, candidate, author, args.why, args.override, verdict=verdict)
    about = f" candidate {candidate}" if candidate is not None else " the hypothesis"
    if candidate is not None and result.candidate_experiment != result.experiment:
        about += f" (of experiment '{result.candidate_experiment}')"
    print(f"decision {result.decision_id}: {verdict}{about} of experiment '{result.experiment}' by "
          f"{result.author}; hypothesis {result.status} (evidence runs {result.evidence})")
    if result.override:
        print(f"overriding the acceptance test: {result.override}")
    for check in result.checks:
        print(f"  acceptance[{check['criterion']}] {check['outcome']}: {check['clause']}")
    return 0


# ---- dse note -----------------------------------------------------------------------------

_NOTE_FLAGS = (("limitation", "limitation"), ("question", "open_question"), ("note", "note"))


def cmd_note(args) -> int:
    given = [(kind, getattr(args, flag)) for flag, kind in _NOTE_FLAGS if getattr(args, flag) is not None]
    author = args.author if args.author is not None else (os.environ.get("DSE_AUTHOR") or _user())
    if not given:
        raise InputError("dse note", "--limitation/--question/--note", None, "at least one note to add")
    flag_of = {kind: flag for flag, kind in _NOTE_FLAGS}
    for kind, text in given:  # checked before any is written: one bad note, none written
        if not text.strip():
            raise InputError("dse note", f"--{flag_of[kind]}", text, "a non-empty note")
    if not author.strip():
        raise InputError("dse note", "--author", author, "a non-empty name")
    with open_store(args.db) as store:
        name = store.experiment(args.experiment)["name"]
        for kind, text in given:
            note_id = store.add_note(args.experiment, kind, text, author)
            print(f"note {note_id}: {kind.replace('_', ' ')} added to experiment '{name}' by {author}")
    return 0


# ---- dse delete -----------------------------------------------------------------------------


def cmd_delete(args) -> int:
    with open_store(args.db) as store:
        name = store.experiment(args.experiment)["name"]
        if args.confirm != name:
            raise InputError("dse delete", "--confirm", args.confirm, f"the experiment's name, '{name}', to confirm")
        try:
            counts = store.delete_experiment(name)
        except ValueError as exc:
            raise InputError("dse delete", "EXPERIMENT", name, f"an experiment nothing else builds on ({exc})") from None
    shown = ", ".join(f"{n} {table}" for table, n in counts.items() if n)
    print(f"deleted experiment '{name}': {shown}; `dse evidence gc` frees its evidence files")
    return 0


# ---- dse export ---------------------------------------------------------------------------


def cmd_export(args) -> int:
    from ..records.export import EXPORT_FORMATS, export_experiment

    if args.format not in EXPORT_FORMATS:
        raise InputError("dse export", "--format", args.format, ", ".join(EXPORT_FORMATS))
    with open_store(args.db) as store:
        name = store.experiment(args.experiment)["name"]
        out = args.out or os.path.join("exports", re.sub(r"[^A-Za-z0-9_.-]+", "_", name))
        paths, check = export_experiment(store, args.experiment, out, args.format)
    for path in paths:
        print(path)
    for line in check.lines():
        print(f"  ! {line}")
    return evidence_verdict(check)


def register(sub) -> None:
    hist = sub.add_parser("history", help="experiments, hypothesis status, decisions and run counts")
    add_db_argument(hist)
    hist.add_argument("--decisions", action="store_true", help="also list the sweeps' proposed verdicts")
    hist.set_defaults(func=cmd_history)

    show = sub.add_parser("show", help="one experiment, candidate (c<ID>) or run (r<ID>) in full")
    show.add_argument("id", metavar="ID", help=_SHOW_ALLOWED)
    add_db_argument(show)
    show.add_argument("--limit", type=int, default=25, help="candidates listed for an experiment (25)")
    inside = show.add_mutually_exclusive_group()
    inside.add_argument("--program", action="store_true",
                        help="a candidate's emitted program, per core, each instruction with its op (lowered again "
                             "as its emulator stage lowers it)")
    inside.add_argument("--banks", action="store_true",
                        help="a candidate's bank lifetimes: which virtual bank holds which tensor, from when to when")
    show.set_defaults(func=cmd_show)

    comp = sub.add_parser("compare", help="two or more candidates of any experiments: the fields that differ, "
                                          "metrics by kind")
    comp.add_argument("candidates", metavar="CANDIDATE", nargs="+",
                      help="candidate ids (the first is the reference for three or more)")
    add_db_argument(comp)
    comp.add_argument("--all-metrics", action="store_true", help="also list the metrics that are equal")
    comp.add_argument("--scope", default="total",
                      help="metric scope: total (default), op, core, ball, bank, dma, bus (the emulator's counters "
                           "per Ball, bank, DMA engine, system bus), phase (the emulator stage's host time by phase), "
                           "output (numerics per graph output), component (area and energy by component, each "
                           "metric's recorded total after its components)")
    comp.set_defaults(func=cmd_compare)

    dec = sub.add_parser("decide", help="accept or reject a candidate, or refute the hypothesis, with the reason")
    dec.add_argument("experiment", metavar="EXPERIMENT", help="experiment name or id")
    which = dec.add_mutually_exclusive_group(required=True)
    which.add_argument("--accept", metavar="CANDIDATE",
                       help="candidate id to accept (confirms the hypothesis; it must pass the acceptance test)")
    which.add_argument("--reject", metavar="CANDIDATE", help="candidate id to reject")
    which.add_argument("--refute", action="store_true", help="refute the hypothesis")
    dec.add_argument("--why", required=True, help="the rationale, recorded with the decision")
    dec.add_argument("--override", metavar="REASON",
                     help="accept a candidate that fails the acceptance test, for this recorded reason")
    dec.add_argument("--author", help="who decides (default $DSE_AUTHOR, else the login name)")
    add_db_argument(dec)
    dec.set_defaults(func=cmd_decide)

    note = sub.add_parser("note", help="add a limitation, open question or note to an experiment, any time")
    note.add_argument("experiment", metavar="EXPERIMENT", help="experiment name or id")
    kinds = note.add_argument_group("what to add (at least one)")
    kinds.add_argument("--limitation", metavar="TEXT", help="a limitation of the experiment's evidence")
    kinds.add_argument("--question", metavar="TEXT", help="an open question")
    kinds.add_argument("--note", metavar="TEXT", help="a free note")
    note.add_argument("--author", help="who writes it (default $DSE_AUTHOR, else the login name)")
    add_db_argument(note)
    note.set_defaults(func=cmd_note)

    delete = sub.add_parser("delete", help="delete an experiment and all its records (its evidence files: "
                                           "dse evidence gc)")
    delete.add_argument("experiment", metavar="EXPERIMENT", help="experiment name or id")
    delete.add_argument("--confirm", required=True, metavar="NAME", help="the experiment's name again")
    add_db_argument(delete)
    delete.set_defaults(func=cmd_delete)

    exp = sub.add_parser("export", help="an experiment's records as CSV or Parquet files, one per table")
    exp.add_argument("experiment", metavar="EXPERIMENT", help="experiment name or id")
    add_db_argument(exp)
    exp.add_argument("--format", default="csv", help="csv (default) or parquet")
    exp.add_argument("--out", help="output folder (default exports/<experiment name>/)")
    exp.set_defaults(func=cmd_export)
