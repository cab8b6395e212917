"""The one command-line entry point, `dse`, mirroring the Python API.

Each module of this package is a command group with a `register(subparsers)` function.
`COMMANDS` names the module of every command, so a run imports only the module of the
command it runs (a read-only command stays free of torch and the emulator); `--help`, or a
word that is no command, imports them all. A new command is a new file and a line there
(`tests/test_startup.py` checks the table against the modules).

`main()` is the CLI's edge, the one place that turns every way a command can end into an
exit code and at most one line on stderr:

- bad input (`InputError`, or a command line argparse refuses): the line names the file,
  the field, the value and what is allowed; exit 2. With `--json` the same fields are
  also printed on stdout as `{"error": {...}}`.
- stopped by something outside the input (`Stopped`: the sweep taken over by another
  process, a database lost for good): its one line, its exit code (75); a rerun resumes.
- Ctrl-C (KeyboardInterrupt) anywhere, start-up included: "interrupted; rerun to resume",
  exit 130.
- a closed stdout (`dse show ... | head`): nothing more is written, exit 141 (128 + SIGPIPE,
  what a shell reports for a tool ended by a closed pipe).
- anything else is a bug: one line, with the path of a file holding the full traceback,
  exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import signal
import sys
import tempfile
import threading
import time
import traceback

from .. import allocator
from ..errors import InputError, Stopped
from ..runner.limits import torch_importing

EXIT_INPUT = InputError.exit_code
EXIT_INTERRUPT = 130
EXIT_PIPE = 141
EXIT_INTERNAL = 1
INTERRUPTED = "dse: interrupted; rerun to resume (what finished is recorded)"


class UsageError(InputError):
    """A command line argparse refuses, as an `InputError` (field: the command)."""

    def __init__(self, prog: str, message: str):
        super().__init__("(command line)", prog, message, f"see `{prog} --help`")
        self.args = (f"{prog}: {message}; see `{prog} --help`",)

    def __str__(self) -> str:
        return self.args[0]


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as `InputError`s: one line (no usage block), and JSON with --json."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        raise UsageError(self.prog, " ".join(message.split()))


# Command -> the module of this package that registers it.
COMMANDS = {
    "calibrate": "calibrate",
    "chips": "chips",
    "compare": "records",
    "decide": "records",
    "delete": "records",
    "emulate": "emulate",
    "emulate-matmul": "emulate_matmul",
    "evidence": "evidence",
    "export": "records",
    "history": "records",
    "lesson": "lessons",
    "lessons": "lessons",
    "map": "map",
    "note": "records",
    "propose": "sweep",
    "recipe": "recipe",
    "replay": "replay",
    "report": "report",
    "show": "records",
    "sweep": "sweep",
    "ui": "ui",
}


def command_modules() -> list[str]:
    """Every command module of this package (found on disk, not from `COMMANDS`)."""
    return sorted(info.name for info in pkgutil.iter_modules(__path__)
                  if not info.name.startswith("_") and info.name != "common")


def _chosen_command(argv: list[str]) -> str | None:
    """The command `argv` names (its first word not an option), if `COMMANDS` knows it."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
        if word in ("-h", "--help"):
            return None
    return None


def version() -> str:
    """dse's version, from the installed package's metadata (no module of dse is imported)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("dse")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


class _Version(argparse.Action):
    """`--version`: the metadata is read only when asked (not at every command's start)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"dse {version()}")
        parser.exit()


def _asks_version(argv: list[str]) -> bool:
    """`dse --version` (before any command word): answered without importing a command module."""
    for word in argv:
        if word == "--version":
            return True
        if not word.startswith("-"):
            return False
    return False


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv` naming a known command, only that command's module is imported."""
    parser = _Parser(prog="dse", description="Design-space exploration for Buckyball-family chips")
    parser.add_argument("--version", action=_Version, help="print dse's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = _chosen_command(argv) if argv is not None else None
    names = [] if argv is not None and _asks_version(argv) else [COMMANDS[chosen]] if chosen else command_modules()
    for name in names:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def one_line(text: str, limit: int = 2000) -> str:
    """`text` on one line (newlines become spaces), cut to `limit` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _error_object(exc: InputError) -> dict:
    value = exc.value
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        value = repr(value)
    body = {"file": exc.file, "field": exc.field, "value": value, "allowed": exc.allowed,
            "message": one_line(str(exc), limit=20000)}
    if exc.suggestions:
        body["did_you_mean"] = exc.suggestions
    unsupported = getattr(exc, "ops", None)  # a recipe's unsupported ops: every one, with where
    if unsupported is not None:
        body["unsupported_ops"] = [{"op": u.op, "count": u.count, "source": u.source, "code": u.code.strip()}
                                   for u in unsupported]
    return {"error": body}


def _wants_json(argv: list[str]) -> bool:
    return "--json" in argv


def _print_json(obj: dict) -> None:
    print(json.dumps(obj, default=str))


def _traceback_file() -> str:
    """Write the current exception's traceback to a file under the temp dir; its path."""
    name = f"dse-crash-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
    path = os.path.join(tempfile.gettempdir(), name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("dse " + " ".join(sys.argv[1:]) + "\n")
        traceback.print_exc(file=f)
    return path


def _stdout_closed() -> int:
    # Point stdout at /dev/null so the interpreter's last flush cannot raise again.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return EXIT_PIPE


def _safe_stderr(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _interrupt_outside_torch_imports(signum, frame) -> None:
    """Ctrl-C as KeyboardInterrupt, except while a torch module is being imported: raised
    there, it can unwind through pybind11's C++ (torch runs Python through py::exec) and
    abort the process (SIGABRT, -6). Then the signal comes again shortly, until the import is over."""
    if torch_importing():
        again = threading.Timer(0.05, os.kill, (os.getpid(), signal.SIGINT))
        again.daemon = True  # never keeps a finished process alive
        again.start()
        return
    global _INTERRUPTED
    if _INTERRUPTED:  # a second Ctrl-C while the first unwinds: the clean-up (runs marked
        return        # crashed, connections closed) finishes, and prints its one line
    _INTERRUPTED = True
    raise KeyboardInterrupt


_INTERRUPTED = False  # the first Ctrl-C of this process has been raised


def _quiet_connection_pool() -> None:
    """SQLAlchemy's pool logs an exception that lands while it closes a connection, its
    traceback included, before it re-raises it (a KeyboardInterrupt: a second Ctrl-C) or
    drops it (a connection already lost). A command's error is its one line; these logs
    stay off the terminal."""
    import logging

    pool = logging.getLogger("sqlalchemy.pool")
    pool.addHandler(logging.NullHandler())
    pool.propagate = False


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit code. `argv` None: the process's own command line (then a
    Ctrl-C after the command has ended, while the interpreter shuts down, is ignored)."""
    as_process = argv is None
    if as_process:
        try:
            signal.signal(signal.SIGINT, _interrupt_outside_torch_imports)
        except (ValueError, OSError):  # not the main thread
            pass
        _quiet_connection_pool()
    try:
        try:
            if as_process:  # (a whole model's run may exec itself under jemalloc: `dse.allocator`)
                allocator.cli_process()  # (inside the try: a Ctrl-C held across that exec lands here)
            return _main(list(sys.argv[1:] if argv is None else argv))
        finally:
            if as_process:
                try:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                except (ValueError, OSError):  # not the main thread
                    pass
    except KeyboardInterrupt:  # a Ctrl-C that reached here while the first one was handled
        _safe_stderr(INTERRUPTED)
        return EXIT_INTERRUPT


def _main(argv: list[str]) -> int:
    as_json = _wants_json(argv)
    try:
        try:
            args = build_parser(argv).parse_args(argv)
            code = args.func(args)
            sys.stdout.flush()
            return code
        except InputError as exc:
            if as_json:
                _print_json(_error_object(exc))
                sys.stdout.flush()
            _safe_stderr("dse: error: " + one_line(str(exc)))
            return EXIT_INPUT
        except Stopped as exc:
            if as_json:
                _print_json({"error": {"message": one_line(str(exc), limit=20000), "stopped": True}})
                sys.stdout.flush()
            _safe_stderr("dse: " + one_line(str(exc)))
            return exc.exit_code
    except KeyboardInterrupt:
        _safe_stderr(INTERRUPTED)
        return EXIT_INTERRUPT
    except BrokenPipeError:
        return _stdout_closed()
    except SystemExit:  # --help, or a command that exits itself
        raise
    except Exception as exc:  # noqa: BLE001 - the edge: a bug is one line and a traceback file
        try:
            where = f"full traceback in {_traceback_file()}"
        except OSError as write_error:
            where = f"could not write the traceback ({write_error})"
        message = one_line(f"{type(exc).__name__}: {exc}", 500)
        if as_json:
            try:
                _print_json({"error": {"message": message, "internal": True, "traceback": where}})
            except (OSError, ValueError):
                pass
        _safe_stderr(f"dse: internal error: {message}; {where}; please report it")
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
