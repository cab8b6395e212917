"""`dse ui`: the live workbench in the browser, over a record store (SQLite or PostgreSQL).

    from dse.records import Store
    from dse.ui import create_app
    app = create_app(Store("records.db"))   # an ASGI app; `dse ui` serves it with uvicorn

Modules: `app` (routes, pages, error pages), `queries` (the candidate table paged, sorted
and filtered in SQL), `csrf` (the forms' cross-site protection), `notes` (notes, links and
refused forms shown again), `artifacts` (array, counter and text viewers), `server` (uvicorn on a
socket bound up front, so a port in use is bad input). Figures come from
`dse.report.interactive`, shared with the static report.
"""

from .app import create_app

__all__ = ["create_app"]
