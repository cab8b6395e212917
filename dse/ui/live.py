"""A sweep followed live: how far it is (counts, percent, ETA) and the best passing candidate
so far, by the one judgement (`dse.runner.acceptance`), for the experiment page's polls; and
the experiments list's standing (the proposal and the decision apart, the accepted
candidates, the sweeps running).

The percent counts units of work: each candidate's analytical evaluation and each emulator
run (pruned ones are not work). Its total is the spec's plan (`dse.runner.progress.planned`,
the sweep bar's first total) until the analytical phase is over, then the candidates there
were; a sweep that ended without an interrupted candidate is at 100 %.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..runner.acceptance import Headline, decided, headline, judge_experiment, proposal_line
from ..runner.progress import planned_from_text
from ..runner.result import DONE


def progress(store, exp: dict, now: datetime) -> dict[str, Any]:
    """Where the experiment's sweep stands: running (and by whom), the candidates by outcome,
    done / total units of work, the percent, the ETA in seconds (None when unknown) and the
    state: "running", "done" (ended, nothing interrupted), "interrupted" or "idle" (no
    sweep has recorded a candidate). Read through the store's contract (`PageReader`) and
    its `sweep_holder`."""
    experiment_id = int(exp["id"])
    sweep = store.sweep_holder(experiment_id)
    counts = store.outcome_counts(experiment_id)
    candidates = sum(counts.values())
    emulator = store.emulator_runs(experiment_id)
    emulating = sum(n for s, n in emulator.items() if s != "pruned")
    emulated = sum(n for s, n in emulator.items() if s in DONE and s != "pruned")
    analysed = store.analysed(experiment_id)
    plan = planned_from_text(exp.get("spec_text"))
    # Once the emulator stage has begun, the analytical phase is over: its candidates are all there are.
    analytical_total = candidates if (emulator or plan is None) else max(plan, candidates)
    total, done = analytical_total + emulating, analysed + emulated
    interrupted = counts["crashed"] > 0
    if sweep is not None:
        state = "running"
    elif candidates == 0:
        state = "idle"
    elif interrupted or counts["running"] or counts["not run"]:
        state = "interrupted"
    else:
        state = "done"
    if state == "done":
        total = done
    percent = 100.0 if state == "done" else (100.0 * done / total if total else 0.0)
    if state == "running":
        percent = min(percent, 99.9)  # 100 % is the ended sweep's
    eta = None
    if sweep is not None and done < total:
        started = datetime.fromisoformat(sweep["started_at"])
        stage = "emulator" if emulator.get("running") else "analytical"
        finished, first = store.finished_since(experiment_id, started, stage)
        if finished and first is not None:
            elapsed = (now - max(started, first)).total_seconds()
            left = (emulating - emulated) if stage == "emulator" else (analytical_total - analysed) + \
                (emulating - emulated)
            eta = max(0.0, elapsed / finished * left)
    percent = round(percent, 1)
    return {"running": sweep is not None, "sweep": sweep, "state": state, "counts": counts,
            "candidates": candidates, "planned": plan, "done": done, "total": total,
            "percent": percent, "eta_seconds": None if eta is None else round(eta, 1),
            "emulating": emulator.get("running", 0),
            # the texts the page shows, made here once (the first render's and each poll's)
            "percent_text": f"{percent:.1f} %", "eta_text": eta_text(eta, state),
            "done_text": f"{done:,} of {total:,} done" + (f" ({emulator.get('running', 0)} emulating)"
                                                         if emulator.get("running") else ""),
            "counts_text": counts_text(counts), "candidates_text": candidates_text(counts)}


def counts_text(counts: dict[str, int]) -> str:
    """"8 candidates: 4 ok, 4 infeasible": the candidates by outcome (those there are)."""
    return f"{sum(counts.values()):,} candidates: " + ", ".join(f"{n:,} {k}" for k, n in counts.items() if n)


def candidates_text(counts: dict[str, int]) -> str:
    """The experiment's facts line: "8 (4 ok runs, 4 infeasible, 0 pruned, ...)"."""
    return (f"{sum(counts.values()):,} ({counts['ok']:,} ok runs, {counts['infeasible']:,} infeasible, "
            f"{counts['pruned']:,} pruned, {counts['failed']:,} failed, {counts['crashed']:,} crashed, "
            f"{counts['running']:,} running)")


def eta_text(seconds: float | None, state: str) -> str:
    if state == "done":
        return "finished"
    if state == "interrupted":
        return "interrupted"
    if seconds is None:
        return "ETA: not known yet"
    if seconds < 60:
        return f"ETA: {seconds:.0f} s"
    if seconds < 3600:
        return f"ETA: {seconds // 60:.0f} min {seconds % 60:.0f} s"
    return f"ETA: {seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"


def judged_headline(store, exp: dict, judgement=None) -> Headline:
    """The experiment page's headline (the judgement's best, the proposal and the decision
    apart), as the page renders it: the live page shows the same one. `judgement`: the
    experiment's, when the caller has it (`judge_experiment` of the spec's objective)."""
    judgement = judgement if judgement is not None else judge_experiment(store, exp)
    return headline(judgement, exp, store.decision_rows(int(exp["id"])))


def headline_json(top: Headline) -> dict[str, Any]:
    return {"best": top.best, "answer": top.lines[2], "proposed": top.proposed, "decided": top.decided,
            "counts": top.counts, "verdict": top.verdict, "accepted": list(top.accepted), "passing": top.passing}


def standing(store) -> dict[int, dict[str, Any]]:
    """Per experiment id: its proposal line and its decision line (apart), the candidates
    its standing decisions accept, whether a sweep runs now and how far it is (percent):
    the experiments list's."""
    by_experiment: dict[int, list[dict]] = {}
    for d in store.decision_rows():
        by_experiment.setdefault(int(d["experiment_id"]), []).append(d)
    out = {}
    for e in store.experiment_summaries():
        rows = by_experiment.get(int(e["id"]), [])
        line, accepted = decided(rows, e["status"])
        sweeping = store.sweep_holder(int(e["id"])) is not None
        out[int(e["id"])] = {"proposed": proposal_line(rows), "decided": line, "accepted": list(accepted),
                             "sweeping": sweeping, "percent": None}
        if sweeping:  # how far, for the sweeps running now (their spec's plan read)
            now = datetime.now(timezone.utc)
            out[int(e["id"])]["percent"] = progress(store, store.experiment(int(e["id"])), now)["percent"]
    return out
