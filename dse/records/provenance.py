"""Where and with what a run executed: host, git state of the dse checkout, versions, command.

Every lookup tolerates absence (no git, not a checkout, a package not installed) and
answers None rather than failing the run it describes.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TRACKED_PACKAGES = ("numpy", "pandas", "torch", "sqlalchemy", "optuna", "dse")


@dataclass(frozen=True)
class Provenance:
    host: str | None
    git_commit: str | None
    git_dirty: bool | None
    versions: dict[str, str | None]
    command: str


def collect(command: str | None = None) -> Provenance:
    commit, dirty = git_state()
    return Provenance(
        host=hostname(),
        git_commit=commit,
        git_dirty=dirty,
        versions=package_versions(),
        command=" ".join(sys.argv) if command is None else command,
    )


def hostname() -> str | None:
    try:
        return socket.gethostname()
    except OSError:
        return None


# Cached per process: the code a process runs is the code it imported at start, so the
# first answer is the right one, and a sweep need not fork git for every run.
@functools.cache
def git_state() -> tuple[str | None, bool | None]:
    """(HEAD commit, dirty?) of the git checkout holding the dse package."""
    checkout = Path(__file__).resolve().parents[2]
    status = _git(checkout, "status", "--porcelain")
    if status is None:
        return None, None
    head = _git(checkout, "rev-parse", "HEAD")  # None in a repo with no commits yet
    return (head.strip() if head else None), bool(status.strip())


@functools.cache
def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in TRACKED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = _source_tree_version() if name == "dse" else None
    return versions


def _source_tree_version() -> str | None:
    # dse run from a checkout without `pip install` has no distribution metadata.
    try:
        import dse

        return dse.__version__
    except (ImportError, AttributeError):
        return None


def _git(cwd: Path, *args: str) -> str | None:
    # GIT_OPTIONAL_LOCKS=0: `git status` must not take index.lock, which would race
    # between parallel workers (and with the user's own git commands).
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            timeout=10,
            env=env,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout
