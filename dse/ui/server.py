"""Serve the UI with uvicorn on a socket bound here, so a bad host or a port in use is
reported as bad input before the server starts; a server other machines can reach only
when asked (`--expose`), and then behind a token (`guard`)."""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys

import uvicorn

from ..errors import InputError
from ..records import Store
from .app import create_app
from .guard import Access


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on (host, port); InputError naming the field if it cannot be."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise InputError("dse ui", "--host", host, f"a local address or host name ({error})") from None
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        field, value = ("--port", port) if error.errno == 98 else ("--host", host)
        raise InputError("dse ui", field, value, f"an address this machine can listen on ({error.strerror or error})") from None
    sock.listen(128)
    return sock


def is_loopback(sock: socket.socket) -> bool:
    """Whether only this machine can reach the socket (127.0.0.0/8, ::1)."""
    address = sock.getsockname()[0]
    return ipaddress.ip_address(address.split("%")[0]).is_loopback


def serve(store: Store, sock: socket.socket, access: Access | None = None) -> None:
    """Serve until Ctrl-C (uvicorn stops gracefully on SIGINT/SIGTERM). Errors a page did
    not handle are logged on stderr with their id (the page shows the id only)."""
    log = logging.getLogger("dse.ui")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    config = uvicorn.Config(create_app(store, access), log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
