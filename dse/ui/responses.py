"""What the UI's pages share to answer with: a refused request (`Problem`) and a figure
with its summary. Kept apart from `app` so that the page modules need not import it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.responses import Response


@dataclass
class Problem(Exception):
    """A request the UI refuses: its HTTP status, a title and what was wrong."""

    status: int
    title: str
    detail: str


def figure_response(fig, summary: dict) -> Response:
    # The figure's JSON as plotly wrote it (one object), with the summary added: not parsed
    # and written again (megabytes at 100,000 candidates).
    body = fig.to_json()
    return Response(f'{body[:-1]}, "summary": {json.dumps(summary)}}}', media_type="application/json")
