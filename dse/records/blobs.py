"""Evidence files: large raw evidence in content-addressed files beside the database
(`<db>.evidence/ab/<sha256>`), each written temp -> fsync -> rename before the row naming
it, so a row never names a file that a crash left half-written."""

from __future__ import annotations

import hashlib
import mimetypes
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from sqlalchemy.engine import URL

from dse.records.sqlite_file import sqlite_evidence_dir


def default_evidence_dir(url: URL) -> Path | None:
    """Where a store's evidence files go unless told: `<db>.evidence` beside a SQLite file
    (None in memory), else $DSE_EVIDENCE_DIR, else a folder per database under
    ~/.local/share/dse/evidence."""
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:"):
            return None
        return sqlite_evidence_dir(url.database)
    if os.environ.get("DSE_EVIDENCE_DIR"):
        return Path(os.environ["DSE_EVIDENCE_DIR"]).expanduser().resolve()
    folder = f"{url.get_backend_name()}-{url.host or 'local'}-{url.port or ''}-{url.database}"
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "dse" / "evidence" / folder


def blob_path(root: Path, sha256: str) -> Path:
    """Where the evidence file of this content lives under `root`."""
    return root / sha256[:2] / sha256


def store_blob(root: Path, source: str | os.PathLike[str] | bytes) -> tuple[str, int, Path]:
    """Copy `source` into the evidence folder `root`: temp -> fsync -> rename; (sha256,
    size, path). Content already stored is not written twice."""
    root.mkdir(parents=True, exist_ok=True)
    digest, size = hashlib.sha256(), 0
    fd, temp = tempfile.mkstemp(dir=root, prefix=".incoming-")
    try:
        with os.fdopen(fd, "wb") as out:
            chunks: Iterable[bytes] = (source,) if isinstance(source, bytes) else _read_chunks(Path(source))
            for chunk in chunks:
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        sha = digest.hexdigest()
        final = blob_path(root, sha)
        final.parent.mkdir(exist_ok=True)
        if final.exists() and final.stat().st_size == size:
            os.unlink(temp)  # the same content is already stored
        else:
            os.chmod(temp, 0o444)
            os.replace(temp, final)
            _fsync_dir(final.parent)
            _fsync_dir(root)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise
    return sha, size, final


def media_type(name: str | None) -> str:
    """The media type of a file by its name; NDJSON is known, the rest is guessed."""
    if name:
        lower = name.lower()
        if lower.endswith((".ndjson", ".jsonl")):
            return "application/x-ndjson"
        guessed, _ = mimetypes.guess_type(lower)
        if guessed:
            return guessed
    return "application/octet-stream"


def _read_chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as source:
        while chunk := source.read(size):
            yield chunk


def _fsync_dir(path: Path) -> None:
    # A rename is durable once the folder holding the new name is synced (POSIX).
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
