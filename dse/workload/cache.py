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
  go first (a hit sets its file's access time; its modification time is left as written),
  and an entry larger than the limit is not kept.
- Ownership: the folder's `manifest.json` lists every entry the cache wrote, with its size
  and sha256. Eviction deletes only entries listed there (a file of the user's in the
  folder, `.pkl` or not, is never touched); a listed file is read only when it hashes to
  its listed digest, or is the very file that did in this boot (below).
- Concurrent writers (commands, pool workers): an entry is written to a temporary file
  in the same folder, then renamed into place and listed in the manifest together, under
  the folder's lock (`.lock`, flock; readers take it shared to read the manifest and open
  the entry), so a reader sees a whole entry and its own digest, or none.
- Durability: an entry is written, not fsynced (the manifest is): a crash may leave it
  torn, which its digest tells on the next hit.
- A corrupt entry (its bytes no longer hash to the manifest's digest, or it does not
  parse) is removed and treated as a miss, rebuilt by the caller; one line on stderr says
  so, naming the file and both digests.
- Layout: a small header, the value pickled (protocol 5) with its contiguous numpy
  buffers (the weights) out of band, then those buffers, 64-byte aligned. A hit maps the
  file copy-on-write and hands the buffers to the unpickler as views of the mapping, so
  the processes of a sweep share their pages; the hit's check reads the mapping once
  (sha256, about 1.5 GB/s: 1.3 s of a real layer's 2 GB entry), its values are not copied.
- Checked once a boot: a hit whose digest matched records the file's identity (inode,
  size, modification time) and the boot's id in the manifest, and a later hit of that very
  file in the same boot is not hashed again. So does the writer, for the bytes it hashed as
  it wrote them (renamed into place whole: only a crash of the system can tear it), its
  modification time set RACY_S seconds back. A torn entry needs a crash, so another boot;
  a change to the file changes its modification time (an entry modified in the RACY_S
  seconds before its check is not recorded, as git does with racily clean files).

This module keeps its own key function (`pipeline_key`); it knows nothing of what it caches
beyond "a picklable value".
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import mmap
import os
import pickle
import stat
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import dse

CACHE_ENV = "DSE_CACHE_DIR"
MAX_BYTES_ENV = "DSE_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 4 * 1024**3
FORMAT = "dse-graph-cache-4"  # bump when what is cached changes shape
SUFFIX = ".pkl"
MANIFEST = "manifest.json"  # the entries this cache wrote: name -> sha256, size (and "seen": `_identity`)
LOCK = ".lock"
# The code a cached graph depends on: capture and the frontend steps.
CODE_DIRS = (Path(__file__).resolve().parent, Path(__file__).resolve().parents[1] / "frontend")


MAGIC = b"DSEGC4\0\0"
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


# A file's sha256 by its path, with the stat it was read under: a key asked again (every
# sweep asks recipe_facts: the dse/workload and dse/frontend sources, tens of files) hashes
# only the files whose stat changed. A file modified in the last RACY_S seconds is hashed
# every time (not kept): a write within the file system's timestamp granularity of the
# read could leave its stat unchanged (git's "racily clean" entries).
_DIGESTS: dict[str, tuple[tuple[int, int, int, int], bytes]] = {}
RACY_S = 2.0


def _file_digest(path: Path) -> bytes:
    st = os.stat(path)
    seen = (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)
    kept = _DIGESTS.get(str(path))
    if kept is not None and kept[0] == seen:
        return kept[1]
    digest = hashlib.sha256(path.read_bytes()).digest()
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > RACY_S * 1e9:
        _DIGESTS[str(path)] = (seen, digest)
    else:
        _DIGESTS.pop(str(path), None)
    return digest


def _digest_files(hasher, root: Path, patterns: tuple[str, ...]) -> None:
    files = sorted({p for pattern in patterns for p in root.rglob(pattern)
                    if p.is_file() and "__pycache__" not in p.parts})
    for path in files:
        hasher.update(str(path.relative_to(root)).encode() + b"\0")
        hasher.update(_file_digest(path))


# A package's installed version by its name, with the import path it was found on and
# the stat of each of its folders: installing or removing a package changes its folder, so
# the metadata is searched again then only (the search lists every folder of the path:
# milliseconds, tens of them on a busy machine, each time a key was asked). As with the
# sources, a folder changed in the last RACY_S seconds is not trusted to show the next change.
_VERSIONS: dict[str, tuple[tuple, str]] = {}


def _installed_version(name: str) -> str:
    seen = []
    for entry in sys.path:
        try:
            st = os.stat(entry or ".")
            seen.append((entry, st.st_mtime_ns, st.st_ino))
        except OSError:
            seen.append((entry, None, None))
    kept = _VERSIONS.get(name)
    if kept is not None and kept[0] == tuple(seen):
        return kept[1]
    found = version(name)
    newest = max((m for _, m, _ in seen if m is not None), default=0)
    if time.time_ns() - newest > RACY_S * 1e9:  # (a folder changed within a tick of this read: asked again)
        _VERSIONS[name] = (tuple(seen), found)
    return found


def pipeline_key(recipe_folder: Path, params: dict[str, Any], steps: list[tuple[str, dict]] | None,
                 kind: str = "pipeline") -> str:
    """The identity of a frontend pipeline's result (sha256 hex). `steps`: (name, options)
    each, or None for the recipe's own list (named by its steps.toml, which the key covers);
    `kind`: what is kept (a pipeline's result, or another fact derived from the same inputs)."""
    hasher = hashlib.sha256()
    # versions from the installed metadata: the key needs no torch import
    head = {"format": FORMAT, "kind": kind, "dse": dse.__version__, "torch": _installed_version("torch"),
            "numpy": _installed_version("numpy"), "params": params, "steps": steps}
    hasher.update(json.dumps(head, sort_keys=True, default=repr).encode())
    for code in CODE_DIRS:
        _digest_files(hasher, code, ("*.py",))
    _digest_files(hasher, Path(recipe_folder), ("*.py", "*.toml"))
    return hasher.hexdigest()


def _path(folder: Path, key: str) -> Path:
    return folder / f"{key}{SUFFIX}"


# ---- the manifest: the entries this cache wrote, and their digests ---------------------------


@contextmanager
def _locked(folder: Path, exclusive: bool) -> Iterator[None]:
    fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # releases the lock


def _manifest(folder: Path) -> dict[str, dict[str, Any]]:
    """The listed entries: file name -> {"sha256", "size"[, "seen"]} (none when the manifest is
    missing or unreadable: its entries are then the folder's, no longer the cache's)."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
        entries = data["entries"] if data.get("format") == FORMAT else {}
        return {name: e for name, e in entries.items() if isinstance(e, dict) and "sha256" in e and "size" in e}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _write_manifest(folder: Path, entries: dict[str, dict[str, Any]]) -> None:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-manifest-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"format": FORMAT, "entries": entries}, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / MANIFEST)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _drop(folder: Path, name: str, sha256: str | None = None) -> bool:
    """Remove a listed entry (only if still listed with `sha256`, when given): its file and
    its line in the manifest. Held under the exclusive lock by the caller."""
    entries = _manifest(folder)
    entry = entries.get(name)
    if entry is None or (sha256 is not None and entry["sha256"] != sha256):
        return False
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISREG(os.lstat(folder / name).st_mode):
            os.unlink(folder / name)
    del entries[name]
    _write_manifest(folder, entries)
    return True


# ---- read and write --------------------------------------------------------------------------


def load(key: str) -> Any | None:
    """The cached value of `key`, or None (a miss, a corrupt entry, the cache off)."""
    folder = cache_dir()
    if folder is None or not folder.is_dir():
        return None
    path = _path(folder, key)
    try:
        with _locked(folder, exclusive=False):  # the manifest's digest and the file it lists, together
            entry = _manifest(folder).get(path.name)
            if entry is None:
                return None  # not an entry of this cache (a file of that name is left alone)
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError):  # gone, a link, empty: a miss
        return None
    seen = _identity(st)
    vouched = seen is not None and entry.get("seen") == seen  # hashed whole in this boot, untouched since
    found = entry["sha256"] if vouched else _digest(mapped)
    problem = None
    if found != entry["sha256"] or len(mapped) != entry["size"]:
        problem = f"sha256 expected {entry['sha256']}, found {found}"
    else:
        try:
            value = _read(path, mapped)
        except Exception as error:  # noqa: BLE001 - whole yet unreadable (another format): rebuild it
            problem = f"unreadable ({type(error).__name__}: {error})"
    if problem is not None:
        with contextlib.suppress(OSError), _locked(folder, exclusive=True):
            _drop(folder, path.name, entry["sha256"])
        print(f"dse: graph cache entry {path} is corrupt ({problem}); removed, rebuilding it", file=sys.stderr)
        return None
    if not vouched and seen is not None and time.time_ns() - st.st_mtime_ns > RACY_S * 1e9:
        _vouch(folder, path.name, entry["sha256"], seen)
    with contextlib.suppress(OSError):  # least recently used goes first; the modification time stays the file's
        os.utime(path, ns=(time.time_ns(), st.st_mtime_ns))
    return value


@functools.cache
def _boot_id() -> str | None:
    """This boot's id (None where the system gives none)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _identity(st: os.stat_result) -> dict[str, Any] | None:
    """What a hash-checked entry is known by in the manifest ("seen"): this boot, and the
    file's inode, size and modification time. None where there is no boot id to tell."""
    boot = _boot_id()
    if boot is None:
        return None
    return {"boot": boot, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _vouch(folder: Path, name: str, sha256: str, seen: dict[str, Any]) -> None:
    """Record that the entry `name` (still listed with `sha256`) hashed whole as `seen`;
    a cache the process cannot write keeps hashing instead."""
    with contextlib.suppress(OSError), _locked(folder, exclusive=True):
        entries = _manifest(folder)
        entry = entries.get(name)
        if entry is not None and entry["sha256"] == sha256 and entry.get("seen") != seen:
            entry["seen"] = seen
            _write_manifest(folder, entries)


_HASHED_CHUNK = 64 * 2 ** 20  # a multiple of every page size


def _digest(mapped: mmap.mmap) -> str:
    """The sha256 of a mapped entry, each chunk's pages given back once hashed (MADV_DONTNEED;
    the mapping is untouched yet, so they read the file again when used, from the page
    cache): a hit's process then holds the pages its caller uses, not the whole entry. A
    real layer's entry is 2 GB (every stage's graph and the reference); emulating it from
    the cache held all of it through the run, 5.15 GB at its peak against 3.92 GB uncached."""
    digest = hashlib.sha256()
    give_back = getattr(mmap, "MADV_DONTNEED", None)  # (Linux and the BSDs)
    with memoryview(mapped) as view:
        for start in range(0, len(view), _HASHED_CHUNK):
            digest.update(view[start:start + _HASHED_CHUNK])
            if give_back is not None:
                mapped.madvise(give_back, start, min(_HASHED_CHUNK, len(view) - start))
    return digest.hexdigest()


class _Hashing:
    """A file being written, hashed as it is written: the hash runs in a thread beside the
    writes (hashlib and the file's large writes let go of the GIL), in the writes' order, so
    a real layer's 2 GB entry costs the longer of the two passes, not their sum."""

    def __init__(self, f):
        self.f, self.size = f, 0
        self._sha256 = hashlib.sha256()
        self._hasher = ThreadPoolExecutor(max_workers=1)  # one worker: the updates in order
        self._updates: list = []

    def write(self, data) -> int:
        self._updates.append(self._hasher.submit(self._sha256.update, data))
        self.size += len(memoryview(data).cast("B"))
        return self.f.write(data)

    def tell(self) -> int:
        return self.f.tell()

    def flush(self) -> None:
        self.f.flush()

    def hexdigest(self) -> str:
        """The digest of everything written (waits for the hash to catch up)."""
        for update in self._updates:
            update.result()  # an update's error is the write's
        return self._sha256.hexdigest()

    def close(self) -> None:
        self._hasher.shutdown(wait=True)


def store(key: str, value: Any) -> Path | None:
    """Keep `value` under `key` (atomically, listed in the manifest with its digest); the
    entry's path, or None when not kept."""
    folder = cache_dir()
    if folder is None:
        return None
    limit = max_bytes()
    path = _path(folder, key)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=SUFFIX)
        try:
            with os.fdopen(fd, "wb") as f:
                out = _Hashing(f)
                # Not fsynced: a hit checks the entry against its digest in the (fsynced)
                # manifest, so an entry a crash left torn is a miss, rebuilt. Syncing a real
                # layer's 2 GB entry made the command wait on the disk for it (27 s of a 140 s
                # run on a busy machine), for a file nothing reads until a later command.
                try:
                    _write(out, value, limit)
                    digest = out.hexdigest()
                finally:
                    out.close()
            seen = _stamped(tmp)
            with _locked(folder, exclusive=True):
                os.replace(tmp, path)
                entries = _manifest(folder)
                entries[path.name] = {"sha256": digest, "size": out.size, **({"seen": seen} if seen else {})}
                _write_manifest(folder, entries)
                _evict(folder, limit, entries)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except (_TooLarge, OSError, pickle.PicklingError, TypeError, AttributeError, BufferError):
        return None  # too large, an unwritable cache or an unpicklable value: the caller's result stands
    return path if path.exists() else None


def _stamped(tmp: str) -> dict[str, Any] | None:
    """The identity (`_identity`) under which the writer vouches for the entry it has just
    hashed as it wrote it: the first hit in this boot then hashes nothing either (1.3 s of a
    real layer's 2 GB entry, the command after `dse recipe check` or a sweep's first
    candidate). Its modification time is set RACY_S seconds back first, so that a change in
    place, even within the clock's tick, gives it another (the racy window of `load`)."""
    try:
        now = time.time_ns()
        os.utime(tmp, ns=(now, now - int(RACY_S * 1e9) - 1))
        return _identity(os.stat(tmp))
    except OSError:
        return None


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


def _read(path: Path, mapped: mmap.mmap) -> Any:
    """The value of an entry written by `_write`, from its private (copy-on-write) mapping:
    its buffers are views of the mapping, writable like the arrays that were stored."""
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
    """Delete the least recently used entries of the manifest until they take at most
    `limit` bytes; nothing the manifest does not list is touched."""
    with _locked(folder, exclusive=True):
        return _evict(folder, limit, _manifest(folder))


def _evict(folder: Path, limit: int, entries: dict[str, dict[str, Any]]) -> list[Path]:
    listed = []
    for name, entry in entries.items():
        try:
            st = os.lstat(folder / name)
        except FileNotFoundError:  # removed by hand: no longer listed
            continue
        if stat.S_ISREG(st.st_mode):
            listed.append((st.st_atime, entry["size"], name))  # (a hit sets the access time)
    listed.sort()
    kept = {name: entries[name] for _, _, name in listed}
    total = sum(size for _, size, _ in listed)
    removed = []
    for _, size, name in listed:
        if total <= limit:
            break
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / name)
        removed.append(folder / name)
        del kept[name]
        total -= size
    if kept != entries:
        _write_manifest(folder, kept)
    return removed
