"""Serve the UI with uvicorn on a socket bound here, so a bad host or a port in use is
reported as bad input before the server starts."""

from __future__ import annotations

import socket

import uvicorn

from ..errors import InputError
from ..records import Store
from .app import create_app


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


def serve(store: Store, sock: socket.socket) -> None:
    """Serve until Ctrl-C (uvicorn stops gracefully on SIGINT/SIGTERM)."""
    config = uvicorn.Config(create_app(store), log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
