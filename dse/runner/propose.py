"""`dse propose SPEC`: an experiment's hypothesis recorded before anything is run.

The experiment row is the one a sweep of the same spec writes (same name, spec hash,
hypothesis, acceptance, workload identity, links), at status "proposed" with no candidate;
`dse sweep SPEC` later finds it by name and spec hash and runs it (status moves to
"testing"), as it resumes any experiment it recorded."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..identity import workload_identity
from ..records import RecordNotFound, Store
from ..records.opening import checked_url
from ..workload.recipes import recipe_name
from .spec import Spec, load_spec, spec_changes, workload_parts


def propose(spec_path: str | Path | Spec, db: str | Path = "records.db") -> tuple[int, str, bool]:
    """Record the spec's experiment untested: (its id, its status, whether it was new).
    An experiment already recorded under this name and spec is returned as it is."""
    spec = spec_path if isinstance(spec_path, Spec) else load_spec(spec_path)
    checked_url(db)
    if spec.model.experiment.links() and "://" not in str(db) and not Path(db).exists():
        resolve_links(spec, None)  # a link into a store that does not exist: nothing created
    m = spec.model
    with Store(db) as store:
        links = resolve_links(spec, store)
        before = {e["name"] for e in store.experiments().to_dict("records")}
        ident = record_experiment(store, spec, links, "rename the experiment to propose the changed spec")
        status = store.experiment(ident)["status"]
    return ident, status, m.experiment.name not in before


def record_experiment(store, spec: Spec, links: list, remedy: str, status: str = "proposed") -> int:
    """The spec's experiment row (`Store.create_experiment`: the one a sweep resumes, found by
    name and spec hash), as both `dse propose` and a sweep write it (`status`: a new one's,
    "testing" for a sweep's); a name the store holds for another spec is one line listing
    the changed fields, then `remedy`."""
    m = spec.model
    workload = workload_parts(spec)
    try:
        return store.create_experiment(
            name=m.experiment.name, hypothesis=m.experiment.hypothesis,
            acceptance=[c.model_dump() for c in m.acceptance], workload_recipe=recipe_name(m.workload.recipe),
            workload_hash=workload_identity(**workload), workload=workload, spec_text=spec.text,
            spec_hash=spec.hash,
            limitations=m.experiment.limitations, open_questions=m.experiment.open_questions, links=links,
            status=status)
    except ValueError:  # the name is taken by another spec: resuming would mix evidence
        recorded = store.experiment(m.experiment.name).get("spec_text") or ""
        raise InputError(spec.path, "experiment.name", m.experiment.name,
                         "a name this store does not hold for a different spec; against the recorded spec, "
                         f"{spec_changes(recorded, spec.text)}; {remedy}") from None


def resolve_links(spec: Spec, store: Store | None) -> list[tuple[str, int, str]]:
    """The spec's `follows` / `reopens` as (relation, experiment id, reason); an experiment
    the store does not hold (or none at all: `store` None) is the spec's error."""
    out = []
    for relation, link in spec.model.experiment.links():
        field = f"experiment.{relation}.experiment"
        if store is None:
            raise InputError(spec.path, field, link.experiment, "an experiment recorded in the store this sweep "
                             "writes to (the store does not exist yet)")
        try:
            other = store.experiment(link.experiment)
        except RecordNotFound as exc:
            raise InputError(spec.path, field, link.experiment, f"an experiment recorded in this store "
                             f"({exc.allowed})", exc.suggestions) from None
        if other["name"] == spec.name:
            raise InputError(spec.path, field, link.experiment, "an earlier experiment, not this one")
        out.append((relation, int(other["id"]), link.reason.strip()))
    return out
