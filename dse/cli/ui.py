"""`dse ui [--db URL] [--host 127.0.0.1] [--port N]`: the live workbench in the browser."""

from __future__ import annotations

from ..errors import InputError
from .common import add_db_argument, open_store

DEFAULT_PORT = 8765


def _port(text: str) -> int:
    if not str(text).isdigit() or not 1 <= int(text) <= 65535:
        raise InputError("dse ui", "--port", text, "a TCP port number from 1 to 65535")
    return int(text)


def cmd_ui(args) -> int:
    port = _port(args.port)
    with open_store(args.db) as store:
        from ..ui.server import bind, serve

        sock = bind(args.host, port)
        host, bound = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"dse ui: {store.engine.url.render_as_string(hide_password=True)} at http://{shown}:{bound}/ "
              f"(Ctrl-C stops)", flush=True)  # fmt: skip
        serve(store, sock)
    return 0


def register(sub) -> None:
    ui = sub.add_parser("ui", help="the live workbench in the browser (experiments, candidates, decisions)")
    add_db_argument(ui)
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    ui.add_argument("--port", default=str(DEFAULT_PORT), help=f"TCP port (default {DEFAULT_PORT})")
    ui.set_defaults(func=cmd_ui)
