"""Cross-site request forgery protection for the UI's forms.

Double-submit token: each browser gets a random token in a SameSite=Strict, HttpOnly
cookie; every form carries the same token in a hidden field; a POST is taken only when the
two match and the browser's Origin (or Sec-Fetch-Site) says the form came from this site.
A page on another site can neither read the cookie nor make the browser send it.
"""

from __future__ import annotations

import hmac
import secrets

from starlette.requests import Request
from starlette.responses import Response

COOKIE = "dse_csrf"
FIELD = "csrf_token"


class CsrfRejected(Exception):
    """A POST without a matching token or from another site: why, for the error page."""


def token(request: Request) -> str:
    """This browser's token (a new one when it has none yet; `set_cookie` sends it)."""
    current = request.cookies.get(COOKIE, "")
    if len(current) >= 32:
        return current
    if not hasattr(request.state, "new_csrf"):
        request.state.new_csrf = secrets.token_urlsafe(32)
    return request.state.new_csrf


def set_cookie(request: Request, response: Response) -> None:
    new = getattr(request.state, "new_csrf", None)
    if new:
        response.set_cookie(COOKIE, new, httponly=True, samesite="strict", path="/")


def check(request: Request, form) -> None:
    """Raise CsrfRejected unless this POST carries this browser's token from this site."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        raise CsrfRejected(f"the form was posted from another site (Sec-Fetch-Site: {site})")
    origin = request.headers.get("origin")
    if origin is not None:
        expected = f"{request.url.scheme}://{request.headers.get('host', '')}"
        if origin != expected:
            raise CsrfRejected(f"the form was posted from {origin}, not from {expected}")
    cookie, sent = request.cookies.get(COOKIE, ""), str(form.get(FIELD, ""))
    if not cookie or not sent or not hmac.compare_digest(cookie, sent):
        raise CsrfRejected("the form's security token is missing or does not match this browser's "
                           "(reload the page and submit again)")
