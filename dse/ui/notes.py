"""Notes, links and decisions on the UI's pages, and the forms that write notes.

What `dse note` adds (limitations, open questions, free notes) and how experiments
`follows` / `reopens` earlier ones show on the experiment page; the candidate page shows
the candidate's own notes (the sweep's) and the experiment's notes that name it ("c12").
A note is written through `Store.add_note`, the same call as `dse note`, so the CLI and
the UI read and write one list. A refused form (a note or a decision) is shown again with
the user's text in it and the reason above, and nothing is written.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..errors import InputError
from ..records.choices import NOTE_KINDS
from ..records.lessons import lessons_of
from . import csrf
from .responses import Problem

if TYPE_CHECKING:
    from .app import Workbench

# The note form's choices, as `dse note` names them (its flags) and in words.
NOTE_CHOICES = (("note", "note"), ("limitation", "limitation"), ("open_question", "open question"))
DECISION_FIELDS = ("candidate", "verdict", "author", "why", "override")
NOTE_FIELDS = ("kind", "text", "author")


def experiment_context(store, exp: dict) -> dict:
    """The experiment page's notes (`dse note`'s, oldest first) and links: those it makes
    (follows / reopens an earlier experiment) and those made to it (followed / reopened by)."""
    links = store.links(exp["id"])
    every = store.notes()
    return {"notes": [n for n in every if n["experiment_id"] == exp["id"]],
            "lessons": lessons_of(every, exp["id"]),  # as `dse show` and `dse lessons` group them
            "links_out": [link for link in links if link["experiment_id"] == exp["id"]],
            "links_in": [link for link in links if link["experiment_id"] != exp["id"]]}


def naming(notes: list[dict], candidate_id: int) -> list[dict]:
    """The notes whose text names the candidate: "c12" (or "candidate 12") as a word."""
    pattern = re.compile(rf"\b(?:c|candidate\s+){int(candidate_id)}\b", re.IGNORECASE)
    return [n for n in notes if pattern.search(n["text"])]


def candidate_context(store, cand: dict) -> dict:
    return {"notes": naming(store.notes(cand["experiment_id"]), int(cand["id"])),
            "note_values": {"kind": "note", "text": f"c{cand['id']}: ", "author": ""}}


def form_values(form, fields: tuple[str, ...]) -> dict[str, str]:
    return {name: str(form.get(name, "")) for name in fields}


async def add_note(bench: Workbench, request: Request) -> Response:
    """POST /experiments/{ref}/notes: a note written as `dse note` writes it; refused (the
    form again, text kept): an empty text or author, a kind `dse note` does not know."""

    exp = bench.experiment(request.path_params["ref"])
    form = await request.form()
    try:
        csrf.check(request, form)
    except csrf.CsrfRejected as error:
        raise Problem(403, "Form refused", str(error)) from None
    values = form_values(form, NOTE_FIELDS)
    back = str(form.get("back", ""))
    try:
        if values["kind"] not in NOTE_KINDS:
            raise InputError("dse note", "kind", values["kind"], ", ".join(NOTE_KINDS))
        note_id = bench.store.add_note(int(exp["id"]), values["kind"], values["text"], values["author"])
    except InputError as error:
        return refused(bench, request, "note", exp, Problem(400, "Note not recorded", str(error)), values,
                       back=back)
    # Back to the page the form was on (a candidate's, or the experiment's own).
    url = back if _own_page(back) else str(request.app.url_path_for("experiment", ref=str(exp["id"])))
    return RedirectResponse(f"{url}#note-{note_id}", status_code=303)


def _own_page(url: str) -> bool:
    """A path of this app's candidate or experiment pages (never another site's URL)."""
    return re.fullmatch(r"/(experiments|candidates)/\d+", url) is not None


def refused(bench: Workbench, request: Request, what: str, exp: dict, problem, values: dict[str, str],
            back: str = "") -> Response:
    """The form (`what`: "note" or "decision") again, with what was typed and why it was
    refused; the refusal's HTTP status (nothing was written)."""
    context = {"note_values": values} if what == "note" else {"decide_values": values}
    candidate = values.get("candidate", "") if what == "decision" else ""
    return bench.page(request, "refused.html.j2", status=problem.status, problem=problem, what=what, exp=exp,
                      back=back if _own_page(back) else "", note_back=back if _own_page(back) else "",
                      decide_candidate=candidate,
                      title=f"dse: {problem.title}", **context)
