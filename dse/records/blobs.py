"""Evidence files: large raw evidence in content-addressed files beside the database
(`<db>.evidence/ab/<sha256>`), and the three things done with them: write, verify, collect.

**Write** (`writing_blob`): the content goes to a temporary file at the folder's top
(`.incoming-*`, fsynced), then the caller writes the row that names it, then the file is
renamed to its digest's name. The whole write holds the folder's lock shared (`.lock`,
flock), so `collect_garbage`, which holds it exclusively, never runs between a file and
its row: it cannot see a live file as unnamed. A crash between the row and the rename
leaves an `.incoming-*` file that the next collection puts in place (its row names it) or
removes (none does).

**Verify** (`check_blob`, `open_verified`): a file is re-hashed whenever it is read,
served, exported or reported; `BlobState.line` is the one line that names a bad one (the
file, the digest expected, the digest found). A symbolic link, in place of a file or of
its two-letter folder, is refused, never followed.

**Collect** (`collect_garbage`): only names this module writes are touched: a regular file
named by its 64-hex digest inside the two-letter folder of its first two digits, and
`.incoming-*` files at the top; any other file (a user's, a link) is left and counted.

No SQLAlchemy here: the light reads (`dse show`) verify too.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import mimetypes
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from dse.errors import InputError
from dse.records.sqlite_file import sqlite_evidence_dir

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

LOCK_NAME = ".lock"
INCOMING = ".incoming-"
DIGEST = re.compile(r"[0-9a-f]{64}")
FOLDER = re.compile(r"[0-9a-f]{2}")
# How long a collection waits for the writes in flight to finish before it gives up.
COLLECT_WAIT_S = 60.0
CHUNK = 1 << 20


def default_evidence_dir(url: URL) -> Path | None:
    """Where a store's evidence files go unless told: `<db>.evidence` beside a SQLite file
    (None in memory), else $DSE_EVIDENCE_DIR, else a folder per database under
    ~/.local/share/dse/evidence."""
    if url.get_backend_name() == "sqlite":
        if url.database in (None, "", ":memory:"):
            return None
        return sqlite_evidence_dir(url.database)
    return server_evidence_dir(url.get_backend_name(), url.host, url.port, url.database)


def server_evidence_dir(backend: str, host: str | None, port: int | None, database: str | None) -> Path:
    """A database server's store's evidence folder unless told: $DSE_EVIDENCE_DIR, else a
    folder per database under ~/.local/share/dse/evidence (read by the light reader too)."""
    if os.environ.get("DSE_EVIDENCE_DIR"):
        return Path(os.environ["DSE_EVIDENCE_DIR"]).expanduser().resolve()
    folder = f"{backend}-{host or 'local'}-{port or ''}-{database}"
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "dse" / "evidence" / folder


def blob_path(root: Path, sha256: str) -> Path:
    """Where the evidence file of this content lives under `root`."""
    return root / sha256[:2] / sha256


# ---- the folder's lock ---------------------------------------------------------------------


@contextmanager
def _folder_lock(root: Path, exclusive: bool, wait_s: float | None = None) -> Iterator[None]:
    """The evidence folder's flock: shared by writers, exclusive for a collection. With
    `wait_s`, an InputError when it is not had in that time."""
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        if wait_s is None:
            fcntl.flock(fd, mode)
        else:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise InputError(root, "evidence folder", str(root),
                                         f"a folder no sweep is writing to for {wait_s:.0f} s (writes kept it "
                                         "busy; run `dse evidence gc` again later)") from None
                    time.sleep(0.01)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


# ---- write ---------------------------------------------------------------------------------


@dataclass
class PendingBlob:
    """An evidence file written under a temporary name, its row not yet written."""

    root: Path
    sha256: str
    size: int
    temp: Path

    @property
    def path(self) -> Path:
        return blob_path(self.root, self.sha256)

    def place(self) -> Path:
        """Rename the file to its digest's name (after its row is written). The same content
        already there is replaced by this copy, known whole."""
        _fsync_dir(self._moved())
        _fsync_dir(self.root)
        return self.path

    def _moved(self) -> Path:
        """`place` but the syncs: the folder now holding the file (to sync)."""
        folder = self.path.parent
        try:
            os.mkdir(folder)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(folder).st_mode):
                raise EvidenceError(BlobState(self.sha256, self.path, "refused", f"{folder} is not a real folder "
                                              "(a link or a file planted in the evidence folder)")) from None
        os.replace(self.temp, self.path)
        return folder


@contextmanager
def writing_blob(root: Path, source: str | os.PathLike[str] | bytes) -> Iterator[PendingBlob]:
    """Write `source` into the evidence folder `root` as a pending file (temp, fsync), hand
    it to the caller to write the row naming it, then place it (`PendingBlob.place`), all
    under the folder's shared lock. An exception in the caller leaves no file behind."""
    with writing_blobs(root, [source]) as (pending,):
        yield pending


@contextmanager
def writing_blobs(root: Path, sources: Sequence[str | os.PathLike[str] | bytes]) -> Iterator[list[PendingBlob]]:
    """`writing_blob` of many files under one hold of the lock: each written pending, the
    caller writes their rows (in one transaction), then all placed, each folder they land
    in synced once, and the evidence folder once."""
    root.mkdir(parents=True, exist_ok=True)
    temps: list[str] = []
    with _folder_lock(root, exclusive=False):
        try:
            pending = [_pending(root, source, temps, synced=len(sources) == 1) for source in sources]
            if len(pending) > 1:  # each file synced before the rows that name it, all together
                _together(_fsync_file, [p.temp for p in pending])
            yield pending
            _together(_fsync_dir, [*dict.fromkeys(p._moved() for p in pending), root])
        finally:
            for temp in temps:
                if os.path.lexists(temp):
                    os.unlink(temp)


def _pending(root: Path, source: str | os.PathLike[str] | bytes, temps: list[str], synced: bool = True) -> PendingBlob:
    """`source` written into `root` under a temporary name (listed in `temps` at once) and
    synced (`synced`; else the caller syncs it)."""
    fd, temp = tempfile.mkstemp(dir=root, prefix=INCOMING)
    temps.append(temp)
    digest, size = hashlib.sha256(), 0
    with os.fdopen(fd, "wb") as out:
        chunks: Iterable[bytes] = (source,) if isinstance(source, bytes) else _read_chunks(Path(source))
        for chunk in chunks:
            digest.update(chunk)
            out.write(chunk)
            size += len(chunk)
        out.flush()
        if synced:
            os.fsync(out.fileno())
    os.chmod(temp, 0o444)
    return PendingBlob(root, digest.hexdigest(), size, Path(temp))


def store_blob(root: Path, source: str | os.PathLike[str] | bytes) -> tuple[str, int, Path]:
    """Copy `source` into the evidence folder with no row to write: (sha256, size, path)."""
    with writing_blob(root, source) as pending:
        pass
    return pending.sha256, pending.size, pending.path


# ---- verify --------------------------------------------------------------------------------

STATES = ("ok", "missing", "altered", "refused")


@dataclass(frozen=True)
class BlobState:
    """What an evidence file is on disk against the digest its row records."""

    sha256: str  # expected
    path: Path
    state: str  # one of STATES
    found: str | None = None  # altered: the digest found; refused: why

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    def line(self) -> str:
        """The one line naming a bad file (the file, the digest expected, what was found)."""
        if self.state == "altered":
            return f"{self.path}: evidence altered: sha256 expected {self.sha256}, found {self.found}"
        if self.state == "missing":
            return f"{self.path}: evidence missing: sha256 expected {self.sha256}, found no file"
        if self.state == "refused":
            return f"{self.path}: evidence refused, never served: {self.found}"
        return f"{self.path}: evidence ok (sha256 {self.sha256})"


class EvidenceError(InputError):
    """An evidence file that is not what its row records (exit code 2): `state.line()`."""

    def __init__(self, state: BlobState):
        super().__init__(state.path, "sha256", state.found, state.sha256)
        self.state = state
        self.args = (state.line(),)

    def __str__(self) -> str:
        return self.args[0]


def _open_checked(root: Path, sha256: str) -> tuple[BlobState, BinaryIO | None]:
    path = blob_path(root, sha256)
    try:
        if not stat.S_ISDIR(os.lstat(path.parent).st_mode):
            return BlobState(sha256, path, "refused", f"{path.parent} is a link or a file, not the evidence "
                                                      "folder's own folder"), None
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return BlobState(sha256, path, "missing"), None
    if stat.S_ISLNK(mode):
        return BlobState(sha256, path, "refused", "a symbolic link planted in the evidence folder, "
                                                  f"pointing to {os.readlink(path)}"), None
    if not stat.S_ISREG(mode):
        return BlobState(sha256, path, "refused", "not a regular file"), None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return BlobState(sha256, path, "missing"), None
    except OSError as error:
        if error.errno == errno.ELOOP:  # made a link since the lstat
            return BlobState(sha256, path, "refused", "a symbolic link planted in the evidence folder"), None
        return BlobState(sha256, path, "refused", f"unreadable ({error.strerror})"), None
    handle = os.fdopen(fd, "rb")
    digest = hashlib.sha256()
    while chunk := handle.read(CHUNK):
        digest.update(chunk)
    found = digest.hexdigest()
    if found != sha256:
        handle.close()
        return BlobState(sha256, path, "altered", found), None
    handle.seek(0)
    return BlobState(sha256, path, "ok"), handle


def check_blob(root: Path, sha256: str) -> BlobState:
    """Re-hash the evidence file of `sha256` under `root`: ok, missing, altered or refused."""
    state, handle = _open_checked(root, sha256)
    if handle is not None:
        handle.close()
    return state


def open_verified(root: Path, sha256: str) -> BinaryIO:
    """The evidence file of `sha256`, open at its start, re-hashed through this very handle
    (what is then read is what was hashed, short of a write to the file in between); an
    EvidenceError naming it when it is missing, altered or a link."""
    state, handle = _open_checked(root, sha256)
    if handle is None:
        raise EvidenceError(state)
    return handle


@dataclass
class EvidenceCheck:
    """The evidence files of some artifact rows, each re-hashed once: the one judgement
    `dse evidence verify`, `dse show`, `dse report` and `dse export` print."""

    states: dict[str, BlobState]  # sha256 -> its state
    artifacts: dict[str, list[int]]  # sha256 -> the artifact ids naming it

    @property
    def counts(self) -> dict[str, int]:
        return {s: sum(1 for b in self.states.values() if b.state == s) for s in STATES}

    @property
    def bad(self) -> list[BlobState]:
        return [b for b in self.states.values() if not b.ok]

    def state_of(self, sha256: str) -> str:
        return self.states[sha256].state

    def lines(self) -> list[str]:
        """One line a bad file, with the artifacts that name it."""
        return [f"{b.line()} (artifact {', '.join(map(str, self.artifacts[b.sha256]))})" for b in self.bad]

    def summary(self) -> str:
        counts = self.counts
        return (f"evidence files: {counts['ok']} ok, {counts['missing']} missing, {counts['altered']} altered, "
                f"{counts['refused']} refused")


def check_evidence(root: Path | None, rows: Iterable[dict]) -> EvidenceCheck:
    """Re-hash the files of artifact rows (each with `id` and `sha256`) under `root`; with
    no evidence folder (an in-memory store) every file is missing."""
    artifacts: dict[str, list[int]] = {}
    for row in rows:
        artifacts.setdefault(row["sha256"], []).append(int(row["id"]))
    states = {sha: (check_blob(root, sha) if root is not None else BlobState(sha, Path(sha), "missing"))
              for sha in artifacts}
    return EvidenceCheck(states, artifacts)


# ---- collect -------------------------------------------------------------------------------


@dataclass
class Collected:
    """What a collection did (or would do, dry): files removed and their bytes, files of
    interrupted writes put in place, files it did not write and left."""

    files: int = 0
    bytes: int = 0
    recovered: int = 0
    foreign: int = 0


def collect_garbage(root: Path, named, dry_run: bool = False, wait_s: float = COLLECT_WAIT_S) -> Collected:
    """Remove the evidence files no artifact row names; `named()` gives the digests the rows
    name, read with the folder locked exclusively (no write in flight). Interrupted writes
    whose row exists are put in place, the others removed. Only this module's names are
    touched, never through a link."""
    done = Collected()
    if not root.is_dir():
        return done
    with _folder_lock(root, exclusive=True, wait_s=wait_s):
        names: set[str] = set(named())
        with os.scandir(root) as top:
            entries = list(top)
        for entry in entries:
            if entry.name.startswith(INCOMING) and entry.is_file(follow_symlinks=False):
                _recover(root, Path(entry.path), names, done, dry_run)
            elif FOLDER.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                with os.scandir(entry.path) as inner:
                    for blob in inner:
                        ours = (DIGEST.fullmatch(blob.name) and blob.name[:2] == entry.name
                                and blob.is_file(follow_symlinks=False))
                        if not ours:
                            done.foreign += 1
                        elif blob.name not in names:
                            done.files, done.bytes = done.files + 1, done.bytes + blob.stat(follow_symlinks=False).st_size
                            if not dry_run:
                                os.unlink(blob.path)
            elif entry.name != LOCK_NAME:
                done.foreign += 1
    return done


def _recover(root: Path, temp: Path, names: set[str], done: Collected, dry_run: bool) -> None:
    """An `.incoming-*` file left by a write that did not finish: in place if a row names
    its content and no whole copy is there, else removed."""
    digest = hashlib.sha256()
    with open(temp, "rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    sha = digest.hexdigest()
    if sha in names and not check_blob(root, sha).ok:
        done.recovered += 1
        if not dry_run:
            PendingBlob(root, sha, temp.stat().st_size, temp).place()
        return
    done.files, done.bytes = done.files + 1, done.bytes + temp.stat().st_size
    if not dry_run:
        os.unlink(temp)


# ---- helpers -------------------------------------------------------------------------------


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


def _read_chunks(path: Path, size: int = CHUNK) -> Iterator[bytes]:
    with open(path, "rb") as source:
        while chunk := source.read(size):
            yield chunk


# Threads that sync a batch's files (or folders) together: the file system commits the
# syncs in flight at once as one journal commit, where one after another each waited for
# its own (3 evidence files of a sweep's frontend dumps: 8 ms one by one on a busy disk,
# 0.6 ms together). Made again in a forked child (a parent's pool has no threads there).
_SYNC_THREADS = 4
_sync_pool: tuple[int, ThreadPoolExecutor] | None = None
_sync_pool_lock = threading.Lock()


def _together(sync, paths: Sequence[Path | str]) -> None:
    """`sync` of every path, issued together; the first error raised once all have ended."""
    global _sync_pool
    if len(paths) <= 1:
        for path in paths:
            sync(path)
        return
    with _sync_pool_lock:
        if _sync_pool is None or _sync_pool[0] != os.getpid():
            _sync_pool = (os.getpid(), ThreadPoolExecutor(_SYNC_THREADS, thread_name_prefix="dse-fsync"))
        pool = _sync_pool[1]
    for done in [pool.submit(sync, path) for path in paths]:
        done.result()


def _fsync_file(path: Path | str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
