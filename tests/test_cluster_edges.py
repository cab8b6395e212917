"""`--cluster` addresses checked before a sweep starts: a closed port, a garbage address, a
name that does not resolve, a port where something other than a Dask scheduler listens.
Each is one line naming the address and why, exit 2, within seconds, nothing written.
(A real scheduler passes the same check: tests/test_dask.py.)"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from dse.runner.cluster import host_and_port
from test_runner import write_spec


@pytest.fixture
def closed_port():
    """A loopback port bound but not listening: connecting is refused, and no other process can take it."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture
def silent_port():
    """A loopback port where a service accepts connections and says nothing (not a Dask scheduler)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for connection in accepted:
        connection.close()


def refused(cli, tmp_path, *args) -> tuple[str, float]:
    spec, db = write_spec(tmp_path, name="far"), tmp_path / "r.db"
    started = time.monotonic()
    code, out, err = cli("sweep", spec, "--db", db, "--no-progress", *args)
    took = time.monotonic() - started
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    assert not db.exists()  # nothing written, no store created
    return lines[0], took


def test_a_closed_port_is_one_line_in_seconds(cli, tmp_path, closed_port):
    line, took = refused(cli, tmp_path, "--cluster", f"tcp://127.0.0.1:{closed_port}", "--connect-timeout", "3")
    assert f"got 'tcp://127.0.0.1:{closed_port}'" in line
    assert f"nothing listens at 127.0.0.1:{closed_port} (connection refused)" in line and took < 10, (line, took)


@pytest.mark.parametrize("address, why", [
    ("not an address!!", "a host name or IP address, not 'not an address!!'"),
    ("tcp://127.0.0.1:99999", "a port from 1 to 65535, not '99999'"),
    ("http://127.0.0.1:8786", "the scheme 'http' is none of tcp, tls"),
    ("tcp://::1:8786", "an IPv6 host in brackets"),
])
def test_a_garbage_address_is_one_line_at_once(cli, tmp_path, address, why):
    line, took = refused(cli, tmp_path, "--cluster", address)
    assert f"field 'cluster': got {address!r}" in line and why in line and took < 10, (line, took)


def test_a_name_that_does_not_resolve_and_a_silent_service_are_one_line(cli, tmp_path, silent_port, monkeypatch):
    line, took = refused(cli, tmp_path, "--cluster", "tcp://no-such-scheduler.invalid:8786", "--connect-timeout", "3")
    assert "the host name 'no-such-scheduler.invalid' does not resolve" in line and took < 10, (line, took)
    # Something listens but sends no Dask handshake (a web server, say): refused within the limit.
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", f"127.0.0.1:{silent_port}")
    line, took = refused(cli, tmp_path, "--connect-timeout", "2")
    assert line.startswith("dse: error: $DASK_SCHEDULER_ADDRESS: field 'DASK_SCHEDULER_ADDRESS'"), line
    assert f"something listens at 127.0.0.1:{silent_port} but sent no Dask handshake within 2 s" in line
    assert 2 <= took < 10, took
    line, _ = refused(cli, tmp_path, "--connect-timeout", "0")
    assert "field '--connect-timeout': got 0.0" in line


@pytest.mark.parametrize("address, expected", [
    ("tcp://10.0.0.5:8786", ("tcp", "10.0.0.5", 8786)),
    ("scheduler.lan", ("tcp", "scheduler.lan", 8786)),
    ("tls://[::1]:9000/", ("tls", "::1", 9000)),
    ("inproc://10.0.0.5/123/1", None),
])
def test_addresses_dask_takes_are_parsed_as_dask_does(address, expected):
    assert host_and_port(address, "--cluster") == expected
