"""What every request to `dse ui` passes before any page sees it (ASGI middleware).

- **Host.** A page served from an attacker's DNS name that resolves to 127.0.0.1 (DNS
  rebinding) is, to the browser, the attacker's own site: it may read and post to us at
  will. Its requests carry the attacker's name in `Host`, so only the names this server
  answers to are taken: 127.0.0.1, localhost and [::1] on the served port, names given with
  `--allow-host` (a reverse proxy's), and, when exposed, IP literals and this machine's
  names. Anything else: HTTP 421, one line.
- **Token** (`--expose`): every request carries the server's token, as `?token=` (which sets
  a cookie, so a browser gives it once), an `Authorization: token …` / `Bearer …` header,
  or that cookie. Without it 401, with a wrong one 403.
- **Parameters.** The path and every query parameter: bounded text without control
  characters (`params.check_request`); 400, one line.
- **Errors.** An exception no page handled: 500 with an error id and no Python text; the
  server log has the traceback under that id.
- **Headers.** Every response may not be framed by another site (clickjacking of the
  decision form), nor sniffed as another type, nor leak its URL (a token) as a referrer.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import socket
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.datastructures import QueryParams

from .params import BadQuery, check_request

log = logging.getLogger("dse.ui")

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
                    (b"content-security-policy", b"frame-ancestors 'none'"),
                    (b"referrer-policy", b"same-origin")]  # fmt: skip


@dataclass(frozen=True)
class Access:
    """Who may talk to the server: extra Host names (a proxy's: `name` for any port, or
    `name:port`), and the token every request must carry (None: loopback, no token)."""

    allow_hosts: tuple[str, ...] = ()
    token: str | None = None
    machine_names: tuple[str, ...] = field(default=())

    @staticmethod
    def exposed(allow_hosts=(), token: str | None = None) -> Access:
        """An exposed server's access: a new random token unless one is given."""
        names = {socket.gethostname().lower(), socket.getfqdn().lower()} - {""}
        return Access(tuple(allow_hosts), token or secrets.token_urlsafe(32), tuple(sorted(names)))


def split_host(header: str) -> tuple[str, int | None] | None:
    """A Host header's (name, port), the name lowercased without its final dot; None when
    it is not one (`[::1]:8765`, `localhost:8765`, `example.org`)."""
    if header.startswith("["):
        name, _, rest = header[1:].partition("]")
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:] if rest else None
    else:
        name, colon, port = header.partition(":")
        port = port if colon else None
    if not name or ":" in (port or "") or (port is not None and not (port.isascii() and port.isdigit())):
        return None
    if port is not None and not 0 < int(port[:6]) < 65536:
        return None
    return name.lower().rstrip("."), None if port is None else int(port)


def host_allowed(header: str, served_port: int | None, access: Access) -> bool:
    parsed = split_host(header)
    if parsed is None:
        return False
    name, port = parsed
    port = 80 if port is None else port
    if name in LOOPBACK_NAMES and (served_port is None or port == served_port):
        return True
    for allowed in access.allow_hosts:
        if allowed.lower().rstrip(".") in (name, f"{name}:{port}"):
            return True
    if access.token is not None:  # exposed: the machine's addresses and names
        if name in access.machine_names:
            return True
        try:
            ipaddress.ip_address(name)  # an IP literal cannot be rebound to another site
            return True
        except ValueError:
            return False
    return False


def cookie_name(base: str, scope) -> str:
    """Cookies do not keep ports apart: two servers on one host name theirs by port."""
    server = scope.get("server") or (None, None)
    return f"{base}_{server[1]}" if server[1] else base


class Guard:
    """The ASGI middleware: Host, token, parameters, errors, headers (the module's list)."""

    def __init__(self, app, access: Access | None = None):
        self.app, self.access = app, access or Access()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        server = scope.get("server") or (None, None)
        host = headers.get("host", "")
        if not host_allowed(host, server[1], self.access):
            return await refuse(send, 421, f"dse ui: this server does not answer to Host {host[:80]!r} "
                                           f"(allowed: 127.0.0.1, localhost or [::1] on its port, or a "
                                           f"name given with --allow-host)")
        extra = []
        if self.access.token is not None:
            verdict = self.check_token(scope, headers)
            if verdict is not None:
                return await refuse(send, *verdict)
            if self.token_in_query(scope):
                name = cookie_name("dse_token", scope)
                extra.append((b"set-cookie", f"{name}={self.access.token}; HttpOnly; SameSite=Lax; "
                                             f"Path=/".encode()))
                if scope["method"] == "GET" and headers.get("sec-fetch-mode") == "navigate":
                    # A browser: the cookie now holds the token; the address bar need not.
                    rest = without_token(scope.get("query_string", b""))
                    path = scope.get("raw_path") or quote(scope["path"]).encode()
                    location = path + (f"?{rest}".encode() if rest else b"")
                    return await refuse(send, 303, "dse ui: signed in", [(b"location", location), *extra])
        try:
            check_request(scope.get("path", ""), QueryParams(scope.get("query_string", b"")))
        except BadQuery as error:
            return await refuse(send, 400, f"Bad request: {error}")
        started = False

        async def send_with_headers(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS, *extra]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            error_id = secrets.token_hex(4)
            log.exception("dse ui: error %s on %s %s", error_id, scope.get("method"), scope.get("path"))
            if started:
                raise
            await refuse(send, 500, f"Internal error {error_id}: the server's log explains it under this id")

    def token_in_query(self, scope) -> bool:
        given = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"))).get("token")
        return given is not None and hmac.compare_digest(given.encode(), self.access.token.encode())

    def check_token(self, scope, headers) -> tuple[int, str] | None:
        """None when the request carries the token; else (status, why)."""
        offered = []
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query:
            offered.append(query["token"])
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() in ("token", "bearer") and value:
            offered.append(value.strip())
        cookies = SimpleCookie()
        try:
            cookies.load(headers.get("cookie", ""))
        except Exception:  # a malformed Cookie header is no token
            cookies = SimpleCookie()
        name = cookie_name("dse_token", scope)
        if name in cookies:
            offered.append(cookies[name].value)
        expected = self.access.token.encode()
        if any(hmac.compare_digest(o.encode(), expected) for o in offered):
            return None
        if offered:
            return 403, "dse ui: wrong token (use the one `dse ui --expose` printed)"
        return 401, ("dse ui: this server needs its token: open the URL `dse ui --expose` printed "
                     "(…/?token=…), or send the header 'Authorization: token …'")


def without_token(query_string: bytes) -> str:
    """The query string with its `token` left out (what a browser keeps in its history)."""
    return urlencode([(k, v) for k, v in parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
                      if k != "token"])


async def refuse(send, status: int, line: str, headers=()) -> None:
    """A one-line plain-text answer (nothing below the guard ran, or it failed)."""
    body = (line.replace("\n", " ") + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS,
                            *([(b"www-authenticate", b"Token")] if status == 401 else []), *headers]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})
