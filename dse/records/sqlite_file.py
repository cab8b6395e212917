"""Whether a file can be a whole SQLite database, judged from its size and its 100-byte
header alone, and whether dse may write to it (no SQLite, no SQLAlchemy): the store's open
and the rerun shortcut's light read both ask before they connect, so a damaged file is
reported, not half-opened."""

from __future__ import annotations

import os
from pathlib import Path

SQLITE_HEADER = b"SQLite format 3\x00"
# A SQLite file up to this size gets SQLite's quick_check on open (a few ms a megabyte):
# corruption then says so at once rather than in the middle of a report.
QUICK_CHECK_MAX_BYTES = 64 * 1024 * 1024


def sqlite_evidence_dir(database: str | Path) -> Path:
    """Where a SQLite store's evidence files go unless told: `<db>.evidence` beside the file."""
    return Path(f"{database}.evidence")


def sqlite_file_problem(path: Path) -> str | None:
    """What a SQLite store at `path` would have to be and is not (the allowed text of the
    error), or None when the file is empty (SQLite's own empty database) or looks whole."""
    try:
        if not path.is_file():
            return "a SQLite file (this is not a regular file)"
        size = path.stat().st_size
        with open(path, "rb") as file:
            header = file.read(100)
    except OSError as error:
        return f"a SQLite file dse can read ({error.strerror or error})"
    if size == 0:
        return None
    if not header.startswith(SQLITE_HEADER[: len(header)]) or len(header) < len(SQLITE_HEADER):
        return "a SQLite record store (this file is not a SQLite database)"
    if len(header) < 100:
        return f"a whole SQLite file (this one is truncated: {size} bytes, shorter than its header)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return f"an intact SQLite file (its header is corrupt: page size {page_size})"
    pages = int.from_bytes(header[28:32], "big")
    # The page count in the header is valid when its version field matches the change counter.
    if header[92:96] == header[24:28] and pages and pages * page_size > size:
        return f"a whole SQLite file (this one is truncated: {size} bytes, its header says {pages} pages of {page_size})"
    if size % page_size:
        return (f"a whole SQLite file (this one is truncated or damaged: {size} bytes is no "
                f"whole number of {page_size}-byte pages)")
    return None


def existing_store_problem(path: Path) -> str | None:
    """`sqlite_file_problem`, then what a store dse writes to needs: the file readable and
    writable, and its folder writable (SQLite keeps its journal beside the file)."""
    problem = sqlite_file_problem(path)
    if problem is not None:
        return problem
    if not os.access(path, os.R_OK | os.W_OK):
        return "a record store dse can read and write (the file is read-only)"
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return (f"a record store in a folder dse can write (SQLite keeps its journal beside the "
                f"file; {path.parent} is read-only)")
    return None
