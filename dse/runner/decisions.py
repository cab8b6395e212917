"""People decide: the one place the rules of a decision live (the CLI's `dse decide` and
the web UI both call `decide`).

- accepting a candidate confirms the hypothesis; the candidate must pass every clause of
  the experiment's acceptance criteria, with the evidence each clause names, against the
  experiment's baseline. Otherwise the decision is refused, naming the clause and its
  values, unless an override reason is given (recorded with the decision).
- a candidate of another experiment may be named; when its workload is not this
  experiment's, that too needs an override.
- rejecting a candidate withdraws the confirmation it gave, if it was the accepted one.
- refuting the hypothesis needs no candidate.
Every decision keeps its author, reason, time, the clauses as evaluated and the evidence
runs; nothing earlier is changed, so the history stays.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from ..records import Store
from .acceptance import judge_candidate, references
from .criteria import PASS, CriterionError, compile_criteria

VERDICTS = ("accepted", "rejected", "refuted")


class DecisionRefused(InputError):
    """A decision the rules refuse (an acceptance clause fails, evidence is lacking): the
    message names the clause and its values, and how to override."""

    def __init__(self, experiment: str, candidate: int, refusal: str):
        super().__init__("dse decide", "--accept", candidate, "a candidate that passes the acceptance test, "
                         "or an --override REASON")
        self.refusal = refusal
        self.args = (f"dse decide: refused to accept candidate {candidate} for experiment '{experiment}': "
                     f"{refusal}; give --override REASON to accept it anyway",)

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True)
class DecisionResult:
    decision_id: int
    experiment_id: int
    experiment: str
    verdict: str
    candidate_id: int | None
    candidate_experiment: str | None  # the candidate's own experiment
    status: str  # the hypothesis' status after the decision
    author: str
    reason: str
    override: str | None
    checks: list[dict]  # the acceptance clauses as evaluated for the candidate
    evidence: list[int]


def decide(store: Store, experiment: str | int, candidate: int | None, author: str, reason: str,
           override: str | None = None, verdict: str = "accepted") -> DecisionResult:
    """Record a person's decision on `experiment`: accept or reject `candidate`, or refute
    the hypothesis (`verdict` "refuted", `candidate` optional). Raises InputError for bad
    arguments and DecisionRefused when the rules refuse; writes nothing then."""
    where = "dse decide"
    if verdict not in VERDICTS:
        raise InputError(where, "verdict", verdict, ", ".join(VERDICTS))
    if not isinstance(reason, str) or not reason.strip():
        raise InputError(where, "--why", reason, "a non-empty reason for the decision")
    if not isinstance(author, str) or not author.strip():
        raise InputError(where, "--author", author, "a non-empty name of who decides")
    if override is not None and not override.strip():
        raise InputError(where, "--override", override, "a non-empty reason for overriding the acceptance test")
    if candidate is None and verdict != "refuted":
        raise InputError(where, "candidate", None, f"a candidate id to mark {verdict}")
    exp = store.experiment(experiment)
    experiment_id = int(exp["id"])
    checks: list[dict] = []
    evidence: list[int] = []
    cand = None
    if candidate is not None:
        cand = store.candidate(candidate)
        _, evidence = store.decision_evidence(experiment_id, candidate)
    if verdict == "accepted":
        checks, refusal = _acceptance(store, exp, cand)
        if refusal and override is None:
            raise DecisionRefused(exp["name"], candidate, refusal)
        if not refusal:
            override = None  # nothing was overridden
    history = store.decisions(experiment_id)
    status = _status_after(history[history["kind"] == "decision"], verdict, candidate, exp["status"])
    decision_id = store.add_decision(
        experiment_id, verdict, reason.strip(), author.strip(), evidence, candidate,
        kind="decision", evidence_kinds=_kinds(exp) if verdict == "accepted" else None,
        override=override.strip() if override else None, checks=checks or None, status=status)
    return DecisionResult(decision_id, experiment_id, exp["name"], verdict, candidate,
                          cand["experiment"] if cand else None, status, author.strip(), reason.strip(),
                          override.strip() if override else None, checks, evidence)


def _kinds(exp: dict) -> list[str]:
    try:
        return compile_criteria(exp["acceptance"]).kinds
    except CriterionError:
        return ["analytical"]


def _acceptance(store: Store, exp: dict, cand: dict) -> tuple[list[dict], str]:
    """(the clauses as evaluated, why accepting `cand` is refused or "")."""
    reasons = []
    other = cand["experiment_id"] != exp["id"]
    if other:
        theirs = store.experiment(cand["experiment_id"])
        if theirs["workload_hash"] != exp["workload_hash"]:
            reasons.append(f"it is a candidate of experiment '{theirs['name']}', whose workload "
                           f"({theirs['workload_recipe']} {theirs['workload_hash'][:12]}) is not this one's "
                           f"({exp['workload_recipe']} {exp['workload_hash'][:12]})")
    if not exp["acceptance"]:
        return [], "; ".join(reasons)
    try:
        compile_criteria(exp["acceptance"])
    except CriterionError as exc:
        return [], "; ".join(reasons + [f"the experiment's acceptance[{exc.index}] `{exc.expr}` cannot be "
                                        f"evaluated ({exc})"])
    base_id = exp["baseline_candidate_id"]
    if base_id is None:
        return [], "; ".join(reasons + [f"experiment '{exp['name']}' has no baseline to test candidate "
                                        f"{cand['id']} against"])
    point = (cand["mapping"] or {}).get("workload")
    if point:  # compared with the baseline's design at the same workload point: identical work
        base_id = references(store, exp, [cand["id"]]).get(cand["id"]) if cand["experiment_id"] == exp["id"] else None
        if base_id is None:
            return [], "; ".join(reasons + [f"it runs the workload point {point}, at which the baseline's design "
                                            "is not recorded: nothing to compare it with on identical work"])
    # The one judgement (the sweep's, the report's, the UI's), of this candidate.
    judgement = judge_candidate(store, exp, cand["id"], base_id)
    status = judgement.status[judgement.position(cand["id"])]
    if status is not None and status != "ok":
        reasons.append(f"it is not feasible: its latest analytical run is {status}")
    checks = judgement.checks(cand["id"])
    failing = [c for c in checks if c.outcome != PASS]
    if failing:
        reasons.append("it does not pass the acceptance test: " + "; ".join(c.describe() for c in failing))
    return [c.as_record() for c in checks], "; ".join(reasons)


def _status_after(people, verdict: str, candidate: int | None, status: str) -> str:
    """The hypothesis' status after this decision, from the people's decisions before it:
    accepting confirms; refuting refutes; rejecting the candidate whose acceptance stands
    returns it to testing."""
    if verdict == "accepted":
        return "confirmed"
    if verdict == "refuted":
        return "refuted"
    standing = None
    for d in people.to_dict("records"):
        if d["verdict"] == "accepted":
            standing = int(d["candidate_id"])
        elif d["verdict"] == "refuted" or (d["verdict"] == "rejected" and d["candidate_id"] == standing):
            standing = None
    if status == "confirmed" and standing == candidate:
        return "testing"
    return status
