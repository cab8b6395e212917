"""Shared by the UI tests: a real store from a real small sweep, a real `dse ui` server on a
free loopback port, and Debian's Chromium driven by Playwright.

Playwright never downloads a browser here: it launches /usr/bin/chromium (or $DSE_CHROMIUM).
Without it the browser tests skip, saying why; under CI=true they fail instead (.ci/run
installs the package).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("DSE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# A small real sweep: the MLP recipe on goban, 24 candidates (some infeasible), user text
# with markup in it (it must show as text everywhere).
SPEC = """
[experiment]
name = "{name}"
hypothesis = "Smaller banks & more workers <img src=x onerror=\\"window.__xss=1\\"> beat one core"
limitations = "analytical only <script>window.__xss=2</script>"
open_questions = "does DMA bound four workers?"

[[acceptance]]
expr = "latency_cycles <= baseline_latency_cycles / 1.5 and private_sram_bytes <= baseline_private_sram_bytes"
prose = "1.5x faster with no more private SRAM"

[workload]
recipe = "mlp"

[baseline]
chip = "goban"
mapping = {{ policy = "framework", double_buffer = false, workers = 1 }}

[[space]]
name = "bank_count"
target = "chip.banks.count"
values = {banks}

[[space]]
name = "bank_rows"
target = "chip.banks.rows"
values = [128, 1024]

[[space]]
name = "workers"
target = "mapping.workers"
values = [1, 2, 4]

[[objectives]]
metric = "latency_cycles"

[[objectives]]
metric = "private_sram_bytes"

[search]
sampler = "grid"
seed = 0
"""


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


# (name, bank counts[, more spec text]): the third also emulates the 2 fastest of its 6
# candidates (pruning the others), so the model-vs-emulator figure has points.
EMULATE_TOP_2 = '\n[stages]\nemulator = "top_k"\ntop_k = 2\nhost_time_repeats = 1\n'
EXPERIMENTS = (("banks-workers", "[4, 8, 16, 20]"), ("second", "[8, 20]"), ("emulated", "[20]", EMULATE_TOP_2))


def make_store(folder: Path, url: str | None = None, experiments=EXPERIMENTS) -> str:
    """Experiments swept for real into a store (SQLite in `folder`, or `url`): its URL."""
    from dse.runner import run_sweep

    db = url or str(folder / "records.db")
    for name, banks, *extra in experiments:
        spec = folder / f"{name}.toml"
        spec.write_text(SPEC.format(name=name, banks=banks) + "".join(extra))
        run_sweep(spec, db, progress=False)
    return db


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortTaken(RuntimeError):
    """`dse ui` found its port in use: taken between `free_port`'s probe and the server's bind."""


def wait_until_up(base: str, proc: subprocess.Popen | None = None, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read()
            taken = proc.returncode == 2 and "--port" in err and "in use" in err
            raise (PortTaken if taken else RuntimeError)(f"dse ui exited with {proc.returncode}: {err}")
        try:
            with urllib.request.urlopen(base + "/", timeout=2):
                return
        except urllib.error.HTTPError:  # it answers (an exposed server: 401 without its token)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.2)
    raise RuntimeError(f"dse ui did not answer at {base} within {timeout} s")


@contextlib.contextmanager
def dse_ui_process(db: str, *args: str):
    """`dse ui --db DB --port P [args]` as a real process: its base URL (on 127.0.0.1) and
    the process; stopped with SIGINT (Ctrl-C)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for attempt in range(5):
        # The process binds its port seconds after the probe (its imports): meanwhile another
        # process may take it, even as the local port of an outgoing connection. Another port.
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "dse", "ui", "--db", db, "--port", str(port), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_up(base, proc)
            break
        except PortTaken:
            if attempt == 4:
                raise
        except BaseException:
            proc.kill()
            proc.wait()
            raise
    try:
        yield base, proc
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def dse_ui_thread(db: str):
    """The same app and server, in a thread of this process (no second interpreter start):
    its base URL."""
    import uvicorn

    from dse.records import Store
    from dse.ui import create_app
    from dse.ui.server import bind

    store = Store(db)
    sock = bind("127.0.0.1", free_port())
    server = uvicorn.Server(uvicorn.Config(create_app(store), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        wait_until_up(base)
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()
        store.close()


@contextlib.contextmanager
def chromium():
    """A headless Debian Chromium under Playwright (skip without it; fail under CI)."""
    if not Path(CHROMIUM).exists():
        reason = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
        if in_ci():
            pytest.fail(f"browser tests cannot run under CI: {reason}", pytrace=False)
        pytest.skip(f"browser tests skipped: {reason}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        if in_ci():
            pytest.fail(f"browser tests cannot run under CI: {error}", pytrace=False)
        pytest.skip(f"browser tests skipped: {error}")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def plots_drawn(page) -> None:
    """Wait until every plot of the page is drawn: a plot drawn late moves what is below it,
    and a click aimed at a link, a form or the table then lands elsewhere (under load a
    filter button's click once went to nothing, and a run link's click on a candidate page)."""
    page.wait_for_function("[...document.querySelectorAll('div.plot[data-src]')].every(d => d.dataset.ready === '1')")


def open_drawn(page, url: str):
    """`page.goto(url)`, then wait for its plots: what a test does before it clicks."""
    response = page.goto(url)
    plots_drawn(page)
    return response


class Console:
    """Console errors and uncaught exceptions of a page (a test ends with none)."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
