"""The sweep's proposed verdict: the acceptance criteria over the recorded evidence.

The hypothesis is *proposed* confirmed when a feasible candidate other than the baseline
meets every clause (the best such candidate by the first objective is the evidence),
proposed refuted when none of the candidates that have the evidence the clauses name
does, and waiting while no candidate has it yet (an `emulator.` clause before any
emulator run). A proposal never sets the hypothesis' status: a person's decision does
(`dse.runner.decisions.decide`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import Store
from .criteria import FAIL, MISSING, PASS, compile_criteria
from .spec import Spec

AUTHOR = "dse sweep (automatic)"


@dataclass(frozen=True)
class Proposal:
    verdict: str  # confirmed, refuted or waiting
    rationale: str
    candidate_id: int | None
    evidence_kinds: list[str]


def outcome(checks) -> str:
    """pass when every clause passes, fail when one fails, else missing (evidence lacking)."""
    outcomes = {c.outcome for c in checks}
    return FAIL if FAIL in outcomes else MISSING if MISSING in outcomes else PASS


def references(store: Store, exp: dict) -> dict[int, int | None]:
    """{candidate: the candidate its acceptance clauses compare with}: the baseline, or, for
    a candidate at another workload point (mapping.workload), the baseline's design at that
    point (None when not recorded): a comparison always runs identical submitted work."""
    import json

    from ..identity import candidate_hash

    cands = store.candidates(exp["id"])
    base_id = exp["baseline_candidate_id"]
    by_hash = dict(zip(cands["hash"], cands["id"].astype(int)))
    base = cands[cands["id"] == base_id]
    if base.empty:
        return {}
    base_config, base_mapping = json.loads(base.iloc[0]["config"]), json.loads(base.iloc[0]["mapping"])
    out = {}
    for cid, mapping in zip(cands["id"].astype(int), cands["mapping"]):
        point = json.loads(mapping).get("workload")
        out[cid] = int(base_id) if not point else by_hash.get(
            candidate_hash(base_config, {**base_mapping, "workload": point}))
    return out


def propose(store: Store, experiment_id: int, spec: Spec) -> Proposal | None:
    """The verdict the evidence suggests, recorded as a proposal when it differs from the
    latest one; None when the spec states no acceptance criteria."""
    exp = store.experiment(experiment_id)
    if not exp["acceptance"]:
        return None
    criteria = compile_criteria(exp["acceptance"])
    kinds = criteria.kinds
    crit = "; ".join(c["expr"] for c in exp["acceptance"])
    base_id = exp["baseline_candidate_id"]
    table = store.metric_table(experiment_id, "analytical")
    base_rows = table[table["candidate_id"] == base_id]
    evidence: list[int] = []
    candidate = None
    if base_rows.empty or base_rows.iloc[0]["status"] != "ok":
        verdict, rationale = "refuted", "the baseline itself is not feasible"
    else:
        refs = references(store, exp)
        ok = table[(table["status"] == "ok") & table["candidate_id"].map(lambda c: refs.get(int(c)) != int(c))]
        ids = [int(c) for c in ok["candidate_id"]]
        totals = store.totals(ids + [r for r in set(refs.values()) if r is not None], kinds)
        outcomes = {c: outcome(criteria.evaluate(totals[c], totals.get(refs.get(c), {}))) for c in ids}
        passing = ok[ok["candidate_id"].map(lambda c: outcomes[int(c)] == PASS).astype(bool)] if ids else ok
        judged = sum(o != MISSING for o in outcomes.values())
        lacking = len(ids) - judged
        obj = spec.model.objectives[0]
        if not passing.empty:
            best = passing.sort_values(obj.metric, ascending=obj.direction == "minimize").iloc[0]
            candidate = int(best["candidate_id"])
            verdict = "confirmed"
            ref_rows = table[table["candidate_id"] == refs.get(candidate)]
            ref_value = ref_rows.iloc[0][obj.metric] if len(ref_rows) else float("nan")
            rationale = (f"{len(passing)} of {len(ids)} feasible candidates meet: {crit}; best is candidate "
                         f"{candidate} with {obj.metric} {best[obj.metric]:.6g} vs baseline "
                         f"{ref_value:.6g}" + ("" if refs.get(candidate) == int(base_id) else
                                               f" (candidate {refs.get(candidate)}: the baseline at its workload point)"))
            _, evidence = store.decision_evidence(experiment_id, candidate)
        elif ids and judged == 0:
            verdict = "waiting"
            rationale = (f"none of {len(ids)} feasible candidates has yet the evidence that {crit} needs "
                         f"({', '.join(kinds)})")
        else:
            verdict = "refuted"
            rationale = f"none of {judged} feasible candidates with the evidence meets: {crit}" + (
                f" ({lacking} more lack evidence: {', '.join(k for k in kinds if k != 'analytical')})" if lacking else "")
        if not evidence:
            evidence = [int(base_rows.iloc[0]["metric_run_id"])]
    proposal = Proposal(verdict, rationale, candidate, kinds)
    last = store.decisions(experiment_id)
    last = last[last["kind"] == "proposal"]
    # A rerun that reaches the same conclusion adds no second proposal.
    if last.empty or last.iloc[-1]["verdict"] != verdict or last.iloc[-1]["rationale"] != rationale:
        store.add_decision(experiment_id, verdict, rationale, AUTHOR, evidence, candidate, kind="proposal",
                           evidence_kinds=kinds)
    return proposal
