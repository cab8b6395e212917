"""Why candidates were not evaluated to the end, said once a reason: "15 candidates
infeasible: op linear_acc: ...". The groups are read once (`Store.reason_groups`, the
light read's too); the sweep's summary, `dse show` and the report print these lines and
refer to them by number instead of repeating a reason a candidate."""

from __future__ import annotations

from typing import Sequence


def reason_lines(groups: Sequence[tuple[str, str, int]]) -> list[str]:
    """"[1] 15 candidates infeasible: <reason>", one line a distinct reason, numbered as
    `reason_refs` refers to them."""
    return [f"[{i}] {n} candidate{'s' if n != 1 else ''} {status}: {reason}"
            for i, (status, reason, n) in enumerate(groups, 1)]


def reason_refs(groups: Sequence[tuple[str, str, int]]) -> dict[tuple[str, str], str]:
    """{(status, reason): "[1]"}: how a candidate's row refers to its reason's line."""
    return {(status, reason): f"[{i}]" for i, (status, reason, _) in enumerate(groups, 1)}


def reason_ref(refs: dict[tuple[str, str], str], status: str | None, reason: str | None) -> str:
    """A row's reference to its reason's line ("" for a candidate with none)."""
    if status not in ("infeasible", "pruned", "failed", "crashed"):
        return ""
    return refs.get((status, reason or "(no reason recorded)"), "")
