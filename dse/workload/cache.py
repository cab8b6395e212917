"""Captured and stepped graphs cached on disk under their content identity.

A capture (torch.export) and its frontend steps take seconds to minutes and give the same
graphs for the same inputs, so the frontend pipeline's result is kept in a file named by
a key over everything it depends on: the recipe folder's source files (model.py,
steps.toml, its own step files), the parameters, the steps and their options, the source
of the code that captures and rewrites (`dse/workload`, `dse/frontend`), and the dse,
torch and numpy versions. A changed byte in any of them is another key: an entry is never
stale, only unused (and evicted in time).

- Where: `$DSE_CACHE_DIR`, else `$XDG_CACHE_HOME/dse/graphs`, else `~/.cache/dse/graphs`;
  `DSE_CACHE_DIR=off` turns the cache off.
- Size: at most `$DSE_CACHE_MAX_BYTES` (default 4 GiB); the least recently used entries
  go first (a hit touches its file), and an entry larger than the limit is not kept.
- Concurrent writers (commands, pool workers): an entry is written to a temporary file
  in the same folder and renamed into place, so a reader sees a whole entry or none.
- A corrupt or unreadable entry is deleted and treated as a miss (rebuilt by the caller).
- Layout: a small header, the value pickled (protocol 5) with its contiguous numpy
  buffers (the weights) out of band, then those buffers, 64-byte aligned. A hit maps the
  file copy-on-write and hands the buffers to the unpickler as views of the mapping: the
  weights are neither read nor copied until used (a warm `dse map` reads only the graph's
  structure), and the processes of a sweep share their pages.

This module keeps its own key function (`pipeline_key`); it knows nothing of what it caches
beyond "a picklable value".
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import pickle
import struct
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import dse

CACHE_ENV = "DSE_CACHE_DIR"
MAX_BYTES_ENV = "DSE_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 * 1024**3
FORMAT = "dse-graph-cache-3"  # bump when what is cached changes shape
SUFFIX = ".pkl"
# The code a cached graph depends on: capture and the frontend steps.
CODE_DIRS = (Path(__file__).resolve().parent, Path(__file__).resolve().parents[1] / "frontend")


MAGIC = b"DSEGC3\0\0"
_COUNTS = struct.Struct("<QQ")  # pickle length, number of out-of-band buffers
_EXTENT = struct.Struct("<QQ")  # a buffer's offset in the file and its length
ALIGN = 64  # a buffer's offset: numpy arrays made on it are aligned for any dtype


class _TooLarge(Exception):
    """An entry larger than the cache's size limit: not kept."""


def cache_dir() -> Path | None:
    """The cache folder, or None when the cache is off."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        return None if configured.strip().lower() in ("", "off", "0", "none") else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dse" / "graphs"


def max_bytes() -> int:
    text = os.environ.get(MAX_BYTES_ENV)
    if text is None:
        return DEFAULT_MAX_BYTES
    try:
        return max(0, int(text))
    except ValueError:  # a bad limit must not stop a command: the default applies
        return DEFAULT_MAX_BYTES


def _digest_files(hasher, root: Path, patterns: tuple[str, ...]) -> None:
    files = sorted({p for pattern in patterns for p in root.rglob(pattern)
                    if p.is_file() and "__pycache__" not in p.parts})
    for path in files:
        hasher.update(str(path.relative_to(root)).encode() + b"\0")
        hasher.update(hashlib.sha256(path.read_bytes()).digest())


def pipeline_key(recipe_folder: Path, params: dict[str, Any], steps: list[tuple[str, dict]] | None,
                 kind: str = "pipeline") -> str:
    """The identity of a frontend pipeline's result (sha256 hex). `steps`: (name, options)
    each, or None for the recipe's own list (named by its steps.toml, which the key covers);
    `kind`: what is kept (a pipeline's result, or another fact derived from the same inputs)."""
    hasher = hashlib.sha256()
    # versions from the installed metadata: the key needs no torch import
    head = {"format": FORMAT, "kind": kind, "dse": dse.__version__, "torch": version("torch"),
            "numpy": version("numpy"), "params": params, "steps": steps}
    hasher.update(json.dumps(head, sort_keys=True, default=repr).encode())
    for code in CODE_DIRS:
        _digest_files(hasher, code, ("*.py",))
    _digest_files(hasher, Path(recipe_folder), ("*.py", "*.toml"))
    return hasher.hexdigest()


def _path(folder: Path, key: str) -> Path:
    return folder / f"{key}{SUFFIX}"


def load(key: str) -> Any | None:
    """The cached value of `key`, or None (a miss, a corrupt entry, the cache off)."""
    folder = cache_dir()
    if folder is None:
        return None
    path = _path(folder, key)
    try:
        value = _read(path)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001 - truncated, corrupt, from another format: rebuild it
        try:
            path.unlink()
        except OSError:
            pass
        return None
    try:
        os.utime(path)  # least recently used goes first
    except OSError:
        pass
    return value


def store(key: str, value: Any) -> Path | None:
    """Keep `value` under `key` (atomically); the entry's path, or None when not kept."""
    folder = cache_dir()
    if folder is None:
        return None
    limit = max_bytes()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                _write(f, value, limit)
                os.fsync(f.fileno())
            os.replace(tmp, _path(folder, key))
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except (_TooLarge, OSError, pickle.PicklingError, TypeError, AttributeError, BufferError):
        return None  # too large, an unwritable cache or an unpicklable value: the caller's result stands
    evict(folder, limit)
    return _path(folder, key)


def _write(f, value: Any, limit: int) -> None:
    """Header, the pickle without its contiguous buffers, then the buffers (aligned)."""
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]  # BufferError for a non-contiguous buffer: not kept
    offset = len(MAGIC) + _COUNTS.size + _EXTENT.size * len(views) + len(body)
    extents = []
    for view in views:
        offset += -offset % ALIGN
        extents.append((offset, view.nbytes))
        offset += view.nbytes
    if offset > limit:
        raise _TooLarge
    f.write(MAGIC + _COUNTS.pack(len(body), len(views)))
    f.write(b"".join(_EXTENT.pack(*e) for e in extents))
    f.write(body)
    for view, (start, _) in zip(views, extents):
        f.write(b"\0" * (start - f.tell()))
        f.write(view)
    f.flush()


def _read(path: Path) -> Any:
    """The value of an entry written by `_write`; its buffers are views of a private
    (copy-on-write) mapping of the file, writable like the arrays that were stored."""
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    view = memoryview(mapped)
    if bytes(view[:len(MAGIC)]) != MAGIC:
        raise ValueError(f"{path}: not a {FORMAT} entry")
    head = len(MAGIC)
    body_length, count = _COUNTS.unpack_from(view, head)
    head += _COUNTS.size
    extents = [_EXTENT.unpack_from(view, head + i * _EXTENT.size) for i in range(count)]
    head += _EXTENT.size * count
    if head + body_length > len(view) or any(start + length > len(view) for start, length in extents):
        raise ValueError(f"{path}: truncated")
    return pickle.loads(view[head:head + body_length], buffers=[view[s:s + n] for s, n in extents])


def evict(folder: Path, limit: int) -> list[Path]:
    """Delete the least recently used entries until the folder holds at most `limit` bytes."""
    entries = []
    for path in folder.glob(f"*{SUFFIX}"):
        if path.name.startswith(".tmp-"):
            continue
        try:
            stat = path.stat()
        except OSError:  # removed meanwhile by another process
            continue
        entries.append((stat.st_mtime, stat.st_size, path))
    entries.sort()
    total = sum(size for _, size, _ in entries)
    removed = []
    for _, size, path in entries:
        if total <= limit:
            break
        try:
            path.unlink()
            removed.append(path)
        except OSError:
            pass
        total -= size
    return removed
