"""`dse ui [--db URL] [--host 127.0.0.1] [--port N] [--allow-host NAME] [--expose]`: the live
workbench in the browser. Loopback only unless `--expose` (then a token guards every
request); docs/security.md says what it trusts."""

from __future__ import annotations

import re
import socket
import sys

from ..errors import InputError
from .common import add_db_argument, open_store

DEFAULT_PORT = 8765
NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,252})")  # a DNS name or an IPv4 address


def _port(text: str) -> int:
    if not re.fullmatch(r"[0-9]{1,5}", str(text)) or not 1 <= int(text) <= 65535:
        raise InputError("dse ui", "--port", text, "a TCP port number from 1 to 65535")
    return int(text)


def _allowed_host(text: str) -> str:
    name, _, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if not NAME.fullmatch(name or text) or (port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536)):
        raise InputError("dse ui", "--allow-host", text, "a host name, optionally with :port (dse.example.org:443)")
    return text.lower()


def cmd_ui(args) -> int:
    port = _port(args.port)
    allowed = tuple(_allowed_host(h) for h in args.allow_host or ())
    with open_store(args.db) as store:
        from ..ui.guard import Access
        from ..ui.server import bind, is_loopback, serve

        sock = bind(args.host, port)
        if not args.expose and not is_loopback(sock):
            sock.close()
            raise InputError("dse ui", "--host", args.host, "a loopback address (127.0.0.1, ::1, localhost); "
                                                            "add --expose to serve other machines, behind a token")
        access = Access.exposed(allowed) if args.expose else Access(allowed)
        host, bound = sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        if host in ("0.0.0.0", "::"):
            shown = socket.gethostname()
        login = f"?token={access.token}" if access.token else ""
        print(f"dse ui: {store.engine.url.render_as_string(hide_password=True)} at http://{shown}:{bound}/{login} "
              f"(Ctrl-C stops)", flush=True)  # fmt: skip
        try:
            serve(store, sock, access)
        except KeyboardInterrupt:  # uvicorn stops gracefully, then raises the Ctrl-C again: the way to stop
            print("dse ui: stopped", file=sys.stderr, flush=True)
    return 0


def register(sub) -> None:
    ui = sub.add_parser("ui", help="the live workbench in the browser (experiments, candidates, decisions)")
    add_db_argument(ui)
    ui.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    ui.add_argument("--port", default=str(DEFAULT_PORT), help=f"TCP port (default {DEFAULT_PORT})")
    ui.add_argument("--allow-host", action="append", metavar="NAME[:PORT]",
                    help="a further name the server answers to in the Host header (a reverse proxy's); repeatable")
    ui.add_argument("--expose", action="store_true",
                    help="allow a --host other machines can reach; every request then needs the printed token")
    ui.set_defaults(func=cmd_ui)
