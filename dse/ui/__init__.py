"""`dse ui`: the live workbench in the browser, over a record store (SQLite or PostgreSQL).

    from dse.records import Store
    from dse.ui import create_app
    app = create_app(Store("records.db"))   # an ASGI app; `dse ui` serves it with uvicorn

Modules: `app` (routes, pages, error pages), `queries` (the candidate table paged, sorted
and filtered, read through the store's contract, `dse.records.contract.PageReader`),
`table` (which metric columns the table shows), `live` (a sweep followed: percent, ETA,
counts, the judged best so far; the experiments list's standing),
`guard` (what every request passes first: Host names, an exposed server's token, bounded
parameters, error ids), `params` (the one parser of URL parameters), `notes` (notes, links and refused
forms shown again), `artifacts` (array, counter and text viewers), `csrf` (the forms'
cross-site protection, bound to the session), `server` (uvicorn on a socket bound up
front, so a port in use is bad input). Figures come from
`dse.report.interactive`, shared with the static report.
"""

from .app import create_app

__all__ = ["create_app"]
