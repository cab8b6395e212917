"""A throwaway PostgreSQL server for the record-store tests.

`pg_server` (session scope) runs initdb into a fresh temporary folder and starts the
server with pg_ctl on a free loopback port, as the `postgres` OS user when the tests run
as root (the server refuses root). It finds the binaries under
/usr/lib/postgresql/*/bin (Debian) or on PATH. `pg_url` (per test) is a new, empty
database on that server, dropped afterwards.

Without the binaries the PostgreSQL tests skip, saying why; under CI=true they fail
instead (CI must test both backends: .ci/run installs the package).

Import the fixtures into a test module: `from pg import pg_server, pg_url  # noqa: F401`.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SUPERUSER = "dse"


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _unavailable(reason: str):
    if _in_ci():
        pytest.fail(f"PostgreSQL tests cannot run under CI: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL tests skipped: {reason} (apt-get install postgresql)")


def find_pg_bin() -> Path | None:
    """The bin folder of the newest installed PostgreSQL server, or None.

    $DSE_PG_BIN, when set, names the folder instead (an empty or missing one: none)."""
    if "DSE_PG_BIN" in os.environ:
        given = Path(os.environ["DSE_PG_BIN"])
        return given if (given / "initdb").exists() and (given / "pg_ctl").exists() else None
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).resolve().parent
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    bin: Path
    datadir: Path
    port: int
    run_as: dict
    log: Path
    _numbers = itertools.count(1)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname="postgres", autocommit=True
        ) as connection:
            connection.execute(sql)

    def create_database(self) -> str:
        name = f"dse_test_{os.getpid()}_{next(self._numbers)}"
        self.admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        self.admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _run(args: list[str], run_as: dict, log: Path | None = None, **kw) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, **run_as, **kw)
    if done.returncode != 0:
        extra = log.read_text()[-2000:] if log is not None and log.exists() else ""
        raise RuntimeError(
            f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}\n{extra}"
        )


class PgUnavailable(Exception):
    """No PostgreSQL server can be started here; the message says why."""


@contextlib.contextmanager
def throwaway_server():
    """Start a PostgreSQL server in a new temporary folder; stop and delete it on exit."""
    pg_bin = find_pg_bin()
    if pg_bin is None:
        raise PgUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) found")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise PgUnavailable("the psycopg driver is not installed (make install)") from None
    run_as: dict = {}
    root = Path(tempfile.mkdtemp(prefix="dse-pg-"))
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            shutil.rmtree(root, ignore_errors=True)
            raise PgUnavailable("running as root and there is no 'postgres' OS user to run the server") from None
        os.chown(root, user.pw_uid, user.pw_gid)
        run_as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "cwd": root}
    datadir, log = root / "data", root / "server.log"
    server = None
    try:
        _run(
            [str(pg_bin / "initdb"), "-D", str(datadir), "-U", SUPERUSER, "--auth=trust",
             "-E", "UTF8", "--no-locale", "--no-sync"],
            run_as,
        )  # fmt: skip
        for attempt in range(5):  # the free port may be taken between probe and start
            port = _free_port()
            options = (
                f"-p {port} -c listen_addresses=127.0.0.1 -k {root} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=60"
            )
            try:
                _run(
                    [str(pg_bin / "pg_ctl"), "-D", str(datadir), "-l", str(log), "-o", options,
                     "-w", "-t", "60", "start"],
                    run_as, log,
                )  # fmt: skip
            except RuntimeError:
                if attempt == 4:
                    raise
                time.sleep(0.2)
                continue
            server = PgServer(pg_bin, datadir, port, run_as, log)
            break
        yield server
    finally:
        if server is not None:
            subprocess.run(
                [str(pg_bin / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "stop"],
                capture_output=True, timeout=60, **run_as,
            )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server():
    try:
        with throwaway_server() as server:
            yield server
    except PgUnavailable as why:
        _unavailable(str(why))


@pytest.fixture
def pg_url(pg_server):
    """A new empty database on the session's server, as a SQLAlchemy URL."""
    name = pg_server.create_database()
    yield pg_server.url(name)
    pg_server.drop_database(name)
