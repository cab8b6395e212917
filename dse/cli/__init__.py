"""The one command-line entry point, `dse`, mirroring the Python API.

Each module of this package is a command group with a `register(subparsers)` function;
modules are found automatically, so a new command is a new file.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from ..errors import InputError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dse", description="Design-space exploration for Buckyball-family chips")
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "common":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InputError as exc:
        print(f"dse: error: {exc}", file=sys.stderr)
        return InputError.exit_code


if __name__ == "__main__":
    sys.exit(main())
