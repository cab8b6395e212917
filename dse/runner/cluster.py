"""A Dask scheduler address checked before a sweep starts: parsed, its name resolved and a
TCP connection opened within a bounded time, so a typo, a closed port or a name that does
not resolve is one line in seconds (exit 2, nothing written), not Dask's 30 s wait ending
in an internal error. Standard library only: a sweep that names no cluster pays nothing."""

from __future__ import annotations

import os
import socket
import sys
import threading

from ..errors import InputError

CLUSTER_ENV = "DASK_SCHEDULER_ADDRESS"
CONNECT_TIMEOUT_S = 5.0
DASK_DEFAULT_PORT = 8786
# Schemes whose address is a TCP host and port (checked here); Dask's other transports
# (inproc, ucx, ws, wss) are left to Dask, under the same time limit.
TCP_SCHEMES = ("tcp", "tls")
OTHER_SCHEMES = ("inproc", "ucx", "ws", "wss")
EXAMPLE = "tcp://HOST:PORT"


def cluster_address(cluster: str | None) -> tuple[str | None, str]:
    """The scheduler address a sweep uses (--cluster, else $DASK_SCHEDULER_ADDRESS) and where it came from."""
    if cluster:
        return cluster, "--cluster"
    from_env = os.environ.get(CLUSTER_ENV)
    return (from_env, f"${CLUSTER_ENV}") if from_env else (None, "--cluster")


def host_and_port(address: str, where: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a TCP scheduler address; None for another Dask transport.
    An InputError for what is no address."""
    def bad(why: str) -> InputError:
        return InputError(where, where.lstrip("$-"), address, f"a Dask scheduler address ({EXAMPLE}): {why}")

    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    scheme = scheme.lower()
    if scheme in OTHER_SCHEMES:
        return None
    if scheme not in TCP_SCHEMES:
        raise bad(f"the scheme '{scheme}' is none of {', '.join(TCP_SCHEMES + OTHER_SCHEMES)}")
    rest = rest.rstrip("/")
    if rest.startswith("["):  # [IPv6]:port
        host, close, tail = rest[1:].partition("]")
        if not close or (tail and not tail.startswith(":")):
            raise bad("an IPv6 host in brackets, then :PORT")
        port_text = tail[1:]
    elif rest.count(":") > 1:
        raise bad("an IPv6 host in brackets ([::1]:8786)")
    else:
        host, _, port_text = rest.partition(":")
    if not host or any(c.isspace() or c in "/?#@" for c in host):
        raise bad(f"a host name or IP address, not {host!r}")
    if not port_text:
        return scheme, host, DASK_DEFAULT_PORT
    if not (port_text.isascii() and port_text.isdigit()) or not 0 < int(port_text) < 65536:
        raise bad(f"a port from 1 to 65535, not {port_text!r}")
    return scheme, host, int(port_text)


def _resolve(host: str, port: int, timeout: float) -> list:
    """getaddrinfo, which has no time limit of its own, in a daemon thread given `timeout`."""
    answer: list = []

    def look_up() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as error:
            answer.append(error)

    thread = threading.Thread(target=look_up, name="dse-cluster-resolve", daemon=True)
    thread.start()
    thread.join(timeout)
    if not answer:
        raise TimeoutError(f"resolving '{host}' took more than {timeout:g} s")
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]


# A Dask scheduler speaks first: on a new connection it writes its handshake, a message
# whose first 8 bytes are its length (native uint64, distributed.comm.tcp). A web server or
# another service on the port sends nothing, or no such length, and Dask would read its
# bytes as a frame length (a MemoryError of exabytes). Checked over plain TCP only.
DASK_HANDSHAKE_MAX_BYTES = 2 ** 24


def _greets_like_dask(probe: socket.socket) -> bool:
    first = b""
    try:
        while len(first) < 8:
            more = probe.recv(8 - len(first))
            if not more:
                return False
            first += more
    except (TimeoutError, socket.timeout):
        return False
    return 0 < int.from_bytes(first, sys.byteorder) < DASK_HANDSHAKE_MAX_BYTES


def check_cluster(cluster: str | None, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """The scheduler address to sweep on (--cluster, else $DASK_SCHEDULER_ADDRESS; None for
    none), once a TCP connection to it opened within `timeout` seconds; else an InputError
    saying why (bad address, name that does not resolve, connection refused, no answer)."""
    address, where = cluster_address(cluster)
    if address is None:
        return None
    parsed = host_and_port(address, where)
    if parsed is None:
        return address
    scheme, host, port = parsed
    field = where.lstrip("$-")

    def unreachable(why: str) -> InputError:
        return InputError(where, field, address, f"a Dask scheduler reachable within {timeout:g} s "
                          f"(--connect-timeout): {why}")

    try:
        infos = _resolve(host, port, timeout)
    except TimeoutError as error:
        raise unreachable(str(error)) from None
    except OSError as error:
        raise unreachable(f"the host name '{host}' does not resolve ({error.strerror or error})") from None
    last: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.settimeout(timeout)
            try:
                probe.connect(sockaddr)
                if scheme == "tcp" and not _greets_like_dask(probe):
                    raise unreachable(f"something listens at {host}:{port} but sent no Dask handshake within "
                                      f"{timeout:g} s (is it a scheduler's port?)")
                return address
            except ConnectionRefusedError:
                last = ConnectionRefusedError(f"nothing listens at {host}:{port} (connection refused)")
            except (TimeoutError, socket.timeout):
                last = TimeoutError(f"{host}:{port} did not answer within {timeout:g} s")
            except OSError as error:
                last = OSError(f"cannot connect to {host}:{port} ({error.strerror or error})")
    raise unreachable(str(last) if last else f"'{host}' has no address") from None
