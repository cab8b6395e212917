"""Cross-site request forgery protection for the UI's forms.

Each browser gets a random session id in a SameSite=Strict, HttpOnly cookie; its forms
carry HMAC(server secret, session id) in a hidden field. A POST is taken only when the
field is that HMAC of the cookie's session, and the browser's Origin (or Sec-Fetch-Site)
says the form came from this site (the guard has checked that Host is a name this server
answers to, so Origin = Host means this site, not a rebinding one).

Bound to the session, not a copy of the cookie (double submit): a cookie someone managed to
plant (a sibling host, a proxy) gives them no token, since the token needs the secret. The
secret lives in the server process: a restart asks for a reload before the next form.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from starlette.requests import Request
from starlette.responses import Response

from .guard import cookie_name

FIELD = "csrf_token"
SESSION = "dse_session"
SECRET = secrets.token_bytes(32)  # this process's; never sent
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")


class CsrfRejected(Exception):
    """A POST without a matching token or from another site: why, for the error page."""


def _session(request: Request) -> str | None:
    current = request.cookies.get(cookie_name(SESSION, request.scope), "")
    return current if SESSION_ID.fullmatch(current) else None


def _token_of(session: str) -> str:
    return hmac.new(SECRET, session.encode(), hashlib.sha256).hexdigest()


def token(request: Request) -> str:
    """The token of this browser's session (a new session when it has none; `set_cookie`
    sends it)."""
    session = _session(request)
    if session is None:
        if not hasattr(request.state, "new_session"):
            request.state.new_session = secrets.token_urlsafe(32)
        session = request.state.new_session
    return _token_of(session)


def set_cookie(request: Request, response: Response) -> None:
    new = getattr(request.state, "new_session", None)
    if new:
        response.set_cookie(cookie_name(SESSION, request.scope), new, httponly=True, samesite="strict", path="/")


def check(request: Request, form) -> None:
    """Raise CsrfRejected unless this POST carries its session's token from this site."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise CsrfRejected(f"the form was posted from another site (Sec-Fetch-Site: {site})")
    origin = request.headers.get("origin")
    if origin is not None:
        expected = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin != expected:
            raise CsrfRejected(f"the form was posted from {origin[:80]}, not from {expected}")
    session, sent = _session(request), str(form.get(FIELD, ""))
    if session is None or not sent or not hmac.compare_digest(_token_of(session).encode(), sent.encode()):
        raise CsrfRejected("the form's security token is missing or does not match this browser's session "
                           "(reload the page and submit again)")
