"""`dse ui` as a server on the network (issue 36): real `dse ui` processes, real HTTP.

DNS rebinding (a Host this server does not answer to) is refused on GET and POST and writes
nothing; a foreign Origin and another session's CSRF token are refused; an exposed server
(`--expose`) answers nothing without its token; every route takes hostile numbers (too big,
superscript, fullwidth, Arabic-Indic, thousands of digits; Hypothesis-generated too) with a
status below 500 and no Python text; an unhandled error shows an id the server's log
explains; and a bounded load while a real sweep writes leaves no 5xx and an intact store.
"""

from __future__ import annotations

import http.client
import re
import shutil
import sqlite3
import urllib.parse

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from dse.records import Store
from dse.ui import create_app
from uiload import hammer, integrity, mix, recorded, sweep_writing
from uiserver import dse_ui_process, make_store

PYTHON_TEXT = re.compile(r"Traceback \(most recent|\b[A-Z]\w*(Error|Exception): ")
# Numbers a URL must not get past the validator: past int64, thousands of digits, digits
# that are not ASCII (superscript, fullwidth, Arabic-Indic, mathematical), signs, exponents.
HOSTILE = ["99999999999999999999", str(2**63), "9" * 5000, "0", "-1", "+1", "1.5", "1e999", "nan", "inf",
           "0x10", "1_000", " 1", "²", "１２", "١٢", "۳", "𝟙", "\x00", "1\n2", "%", "a" * 3000, "..", "⁹⁹"]
# Refused as an id wherever one is taken (an experiment's path takes names too: "1.5" is one).
NOT_AN_ID = {"99999999999999999999", str(2**63), "9" * 5000, "0", "²", "１２", "١٢", "۳", "𝟙", "⁹⁹"}
QUERY_NAMES = ["page", "per_page", "after", "watch", "c", "min", "max", "sort", "order", "status", "q", "metric",
               "x", "y", "ppa_x", "ppa_y", "kind", "all", "token"]


@pytest.fixture(scope="module")
def store_db(tmp_path_factory):
    return make_store(tmp_path_factory.mktemp("trust"), experiments=(("banks-workers", "[8, 20]"),))


@pytest.fixture(scope="module")
def server(store_db):
    with dse_ui_process(store_db, "--allow-host", "proxy.example") as (base, _proc):
        yield base


def request(base: str, method: str, path: str, headers: dict | None = None, body: str | None = None):
    """(status, body text, headers) of one request exactly as given (Host included)."""
    connection = http.client.HTTPConnection(urllib.parse.urlsplit(base).netloc, timeout=60)
    try:
        connection.putrequest(method, path, skip_host="Host" in (headers or {}), skip_accept_encoding=True)
        data = body.encode() if body is not None else None
        for name, value in {**({"Content-Type": "application/x-www-form-urlencoded"} if data else {}),
                            **(headers or {})}.items():
            connection.putheader(name, value)
        if data is not None:
            connection.putheader("Content-Length", str(len(data)))
        connection.endheaders(data)
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8", "replace"), response.headers
    finally:
        connection.close()


def cookie_of(headers, prefix: str) -> str:
    """The `name=value` of the cookie set whose name starts with `prefix`."""
    return next(c.split(";")[0] for c in headers.get_all("set-cookie") or [] if c.startswith(prefix))


def session(base: str, headers: dict | None = None) -> tuple[str, str]:
    """A browser's session: (its Cookie header, the form's CSRF token)."""
    status, body, answer = request(base, "GET", "/experiments/1", headers)
    assert status == 200
    return cookie_of(answer, "dse_session_"), re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)


def decisions(db: str) -> int:
    with Store(db) as store:
        return len(store.decisions())


def a_candidate(db: str) -> int:
    with Store(db) as store:
        return int(store.candidates("banks-workers")["id"].iloc[1])


def decide_form(token: str, candidate) -> str:
    return urllib.parse.urlencode({"csrf_token": token, "candidate": str(candidate), "verdict": "reject",
                                   "author": "mallory", "why": "posted by the test"})


# ---- Host: DNS rebinding -------------------------------------------------------------------


def test_a_rebinding_host_is_refused_on_get_and_post(server, store_db):
    port = urllib.parse.urlsplit(server).port
    cookie, token = session(server)
    form = decide_form(token, a_candidate(store_db))
    before = decisions(store_db)
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", f"localhost:{port}.evil.example",
                 f"127.0.0.1.nip.io:{port}", ""):
        status, body, _ = request(server, "GET", "/experiments/1", {"Host": host})
        assert status == 421 and body.count("\n") == 1 and "Host" in body, (host, status, body)
        # The attacker's page posts with its own name as Host and Origin (Origin = Host): refused.
        status, body, _ = request(server, "POST", "/experiments/1/decisions",
                                  {"Host": host, "Origin": f"http://{host}", "Cookie": cookie}, form)
        assert status == 421, (host, status, body)
    assert decisions(store_db) == before
    # The names it serves, and the proxy's given with --allow-host, are answered.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LocalHost.:{port}", "proxy.example",
                 "proxy.example:443"):
        status, _, _ = request(server, "GET", "/", {"Host": host})
        assert status == 200, host
    # The same POST from this site is taken (the refusals above are not a broken form).
    status, body, _ = request(server, "POST", "/experiments/1/decisions",
                              {"Origin": server, "Cookie": cookie}, form)
    assert status == 303, body
    assert decisions(store_db) == before + 1


# ---- CSRF: Origin and the session-bound token -----------------------------------------------


def test_a_foreign_origin_or_another_sessions_token_is_refused(server, store_db):
    cookie, token = session(server)
    other_cookie, other_token = session(server)
    assert cookie != other_cookie and token != other_token
    candidate = a_candidate(store_db)
    before = decisions(store_db)
    planted = cookie.split("=")[0] + "=" + "A" * 43
    for headers, form, fragment in (
        ({"Origin": "http://evil.example", "Cookie": cookie}, decide_form(token, candidate), "evil.example"),
        ({"Sec-Fetch-Site": "cross-site", "Cookie": cookie}, decide_form(token, candidate), "another site"),
        ({"Origin": server, "Cookie": cookie}, decide_form(other_token, candidate), "session"),  # not its token
        ({"Origin": server, "Cookie": planted}, decide_form(token, candidate), "session"),  # a planted cookie
        ({"Origin": server}, decide_form(token, candidate), "session"),  # no cookie
    ):
        status, body, _ = request(server, "POST", "/experiments/1/decisions", headers, form)
        assert status == 403 and fragment in body, (headers, status)
    # Control characters in the form's text (PostgreSQL takes no NUL): 400, nothing written.
    for field in ("author", "why"):
        form = urllib.parse.parse_qs(decide_form(token, candidate))
        form = urllib.parse.urlencode({**{k: v[0] for k, v in form.items()}, field: "ada\x00"})
        status, body, _ = request(server, "POST", "/experiments/1/decisions", {"Origin": server, "Cookie": cookie},
                                  form)
        assert status == 400 and field in body, (field, status)
    # Hostile numbers in the form: 400, one line, nothing written.
    for value in ("²", "99999999999999999999", "9" * 5000, "１"):
        status, body, _ = request(server, "POST", "/experiments/1/decisions", {"Origin": server, "Cookie": cookie},
                                  decide_form(token, value))
        assert status == 400 and "candidate" in body and not PYTHON_TEXT.search(body), (value, status)
    assert decisions(store_db) == before


# ---- hostile numbers on every route ----------------------------------------------------------


def routes(db: str) -> list[tuple[str, str, list[str]]]:
    """Every route of the app: (method, path template, its path parameters)."""
    with Store(db) as store:
        app = create_app(store)
    return [(sorted(r.methods - {"HEAD"})[0], r.path, list(r.param_convertors))
            for r in app.routes if isinstance(r, Route)]


def ask(base: str, method: str, template: str, names: list[str], value: str, query: dict, form: str | None = None):
    path = template
    for name in names:
        path = path.replace("{" + name + "}", urllib.parse.quote(value, safe=""))
    if query:
        path += "?" + urllib.parse.urlencode(query)
    return request(base, method, path, {"Origin": base} if method == "POST" else None, form if method == "POST" else None)


def assert_clean(status: int, body: str, headers, what) -> None:
    assert status < 500, (what, status, body[:300])
    if "javascript" not in headers.get("content-type", ""):  # (plotly.js names its own errors)
        assert not PYTHON_TEXT.search(body), (what, PYTHON_TEXT.search(body).group(0))


def test_every_route_refuses_hostile_numbers_with_one_line(server, store_db):
    table = routes(store_db)
    assert len(table) >= 15 and any(names for _, _, names in table)
    for method, template, names in table:
        for value in HOSTILE if names else HOSTILE[:3]:
            status, body, headers = ask(server, method, template, names, value, {})
            assert_clean(status, body, headers, (template, value))
            if names and value in NOT_AN_ID:
                assert status == 400, (template, value, status)
            if status == 400:
                line = re.search(r'id="problem">(.*?)</p>', body, re.S)
                assert "\n" not in (line.group(1) if line else body.rstrip("\n")), (template, value)
        # All query parameters hostile at once, on a real record.
        for value in ("9" * 25, "١٢"):
            status, body, headers = ask(server, method, template, names, "1", dict.fromkeys(QUERY_NAMES, value))
            assert_clean(status, body, headers, (template, "query", value))


def hostile_text():
    unicode_digits = st.text(st.characters(categories=["Nd", "No"]), min_size=1, max_size=30)
    big = st.integers(min_value=-(2**80), max_value=2**80).map(str)
    return st.one_of(st.sampled_from(HOSTILE), unicode_digits, big, st.text(max_size=40))


@pytest.fixture(scope="module")
def every_route(store_db):
    return routes(store_db)


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_urls_on_every_route_never_answer_5xx_or_python_text(server, every_route, data):
    method, template, names = data.draw(st.sampled_from(every_route))
    value = data.draw(hostile_text())
    query = data.draw(st.dictionaries(st.sampled_from(QUERY_NAMES), hostile_text(), max_size=4))
    form = urllib.parse.urlencode({"csrf_token": "x", "candidate": data.draw(hostile_text()), "verdict": "accept",
                                   "author": data.draw(hostile_text()), "why": data.draw(hostile_text())})
    status, body, headers = ask(server, method, template, names, value, query, form)
    assert_clean(status, body, headers, (method, template, value, query))


# ---- the token of an exposed server; error ids -----------------------------------------------


def test_a_non_loopback_host_needs_expose(cli, store_db):
    code, _, err = cli("ui", "--db", store_db, "--host", "0.0.0.0")
    assert code == 2 and "--expose" in err and err.count("\n") == 1, err
    code, _, err = cli("ui", "--db", store_db, "--allow-host", "evil example")
    assert code == 2 and "--allow-host" in err and err.count("\n") == 1, err


@pytest.fixture(scope="module")
def exposed(store_db, tmp_path_factory):
    """`dse ui --host 0.0.0.0 --expose` over a copy of the store: (base, token, process, db)."""
    db = str(tmp_path_factory.mktemp("exposed") / "records.db")
    shutil.copy(store_db, db)
    with dse_ui_process(db, "--host", "0.0.0.0", "--expose") as (base, proc):
        line = proc.stdout.readline()
        token = re.search(r"\?token=([A-Za-z0-9_-]{40,})", line).group(1)
        yield base, token, proc, db


def test_an_exposed_server_answers_nothing_without_its_token(exposed):
    base, token, _proc, db = exposed
    before = decisions(db)
    for path in ("/", "/experiments/1", "/static/plotly.min.js", "/candidates/1"):
        status, body, headers = request(base, "GET", path)
        assert status == 401 and "token" in body and body.count("\n") == 1, (path, status)
    status, body, _ = request(base, "GET", "/", {"Authorization": "token wrong"})
    assert status == 403 and "wrong token" in body
    status, _, _ = request(base, "GET", "/?token=" + token[:-1])
    assert status == 403
    # With the token: a header, or ?token= once, which sets the cookie (a browser's navigation
    # is sent on without the token in its address).
    assert request(base, "GET", "/experiments/1", {"Authorization": f"token {token}"})[0] == 200
    assert request(base, "GET", "/", {"Authorization": f"Bearer {token}"})[0] == 200
    status, _, headers = request(base, "GET", f"/experiments/1?sort=id&token={token}")
    assert status == 200
    cookie = cookie_of(headers, "dse_token_")
    assert request(base, "GET", "/runs/1", {"Cookie": cookie})[0] == 200
    status, _, headers = request(base, "GET", f"/experiments/1?sort=id&token={token}", {"Sec-Fetch-Mode": "navigate"})
    assert status == 303 and headers["location"] == "/experiments/1?sort=id" and cookie_of(headers, "dse_token_") == cookie
    # A POST without the token: refused before the form is read; nothing written.
    _, csrf_token = session(base, {"Cookie": cookie})
    status, _, _ = request(base, "POST", "/experiments/1/decisions", {"Origin": base},
                           decide_form(csrf_token, a_candidate(db)))
    assert status == 401 and decisions(db) == before
    # Exposed, the Host check still holds for names (an IP literal cannot be rebound).
    assert request(base, "GET", "/", {"Host": "evil.example", "Cookie": cookie})[0] == 421
    assert request(base, "GET", "/", {"Host": "192.0.2.7:80", "Cookie": cookie})[0] == 200


def test_an_unhandled_error_shows_an_id_the_log_explains(exposed):
    base, token, proc, db = exposed
    # A store damaged under the running server (a table gone): the page fails.
    with sqlite3.connect(db) as connection:
        connection.execute("alter table decision rename to decision_gone")
    status, body, _ = request(base, "GET", "/experiments/1", {"Authorization": f"token {token}"})
    assert status == 500 and body.count("\n") == 1 and not PYTHON_TEXT.search(body), body
    error_id = re.search(r"Internal error ([0-9a-f]{8})", body).group(1)
    proc.send_signal(2)  # Ctrl-C: the way `dse ui` says it stops; a clean stop, nothing to resume
    assert proc.wait(timeout=20) == 0
    log = proc.stderr.read()
    assert f"error {error_id} on GET /experiments/1" in log and "Traceback" in log and "decision" in log
    assert log.endswith("dse ui: stopped\n") and "interrupted" not in log


# ---- a bounded load while a sweep writes ------------------------------------------------------


def test_load_while_a_sweep_writes_to_the_store(server, store_db, tmp_path):
    with sweep_writing(store_db, tmp_path, banks="[8, 20]") as sweep:
        running = sweep.poll() is None
        load = hammer(server, mix(store_db), requests=300, clients=16)
    print(f"\nload while a sweep writes (sweep running at the start: {running}): {load.summary()}")
    assert not load.failures, load.failures[:5]
    assert len(load.latencies) == 300 and set(load.statuses) <= {200, 400}
    assert recorded(store_db) == 12  # the sweep under load recorded every candidate
    assert integrity(store_db) == "ok"
