"""The folders `dse recipe check` writes its numbered dumps to, and two of them compared.

A second check never overwrites the first's dumps: a folder that already holds files is
kept, and the run writes to the first free sibling `<folder>.2`, `<folder>.3`, ... (or in
place with --force). `compare` reads two such folders (or any two folders of files) byte for
byte: per file same / different / only in A / only in B; for a different text dump its
first differing line, for a different .npy array its first differing index and its largest
absolute difference, for any other file its first differing byte. numpy only: no torch."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError

SAME, DIFFERENT, ONLY_A, ONLY_B = "same", "different", "only in A", "only in B"


def fresh_dump_dir(folder: Path, force: bool = False) -> Path:
    """Where a check's dumps go: `folder` when it is new, empty or `force`d; else the first
    `<folder>.N` (N = 2, 3, ...) that does not hold files yet."""
    if force or not _holds_files(folder):
        return folder
    n = 2
    while _holds_files(folder.with_name(f"{folder.name}.{n}")):
        n += 1
    return folder.with_name(f"{folder.name}.{n}")


def _holds_files(folder: Path) -> bool:
    return folder.exists() and (not folder.is_dir() or any(folder.iterdir()))


@dataclass(frozen=True)
class FileDiff:
    path: str  # relative to both folders
    status: str  # SAME, DIFFERENT, ONLY_A, ONLY_B
    detail: str = ""  # where and how much a different file differs

    def line(self) -> str:
        return f"{self.status:<10} {self.path}" + (f": {self.detail}" if self.detail else "")


def _files(folder: Path, side: str) -> dict[str, Path]:
    if not folder.exists():
        raise InputError(folder, side, str(folder), "an existing folder of dumps (`dse recipe check --out DIR`)")
    if not folder.is_dir():
        raise InputError(folder, side, str(folder), "a folder of dumps, not a file")
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}


def compare(a: Path, b: Path) -> list[FileDiff]:
    """Every file of folders `a` and `b` (recursively, by relative path, sorted)."""
    files_a, files_b = _files(Path(a), "A"), _files(Path(b), "B")
    out = []
    for rel in sorted(set(files_a) | set(files_b)):
        if rel not in files_b:
            out.append(FileDiff(rel, ONLY_A))
        elif rel not in files_a:
            out.append(FileDiff(rel, ONLY_B))
        else:
            data_a, data_b = files_a[rel].read_bytes(), files_b[rel].read_bytes()
            out.append(FileDiff(rel, SAME) if data_a == data_b else FileDiff(rel, DIFFERENT, _detail(rel, data_a, data_b)))
    return out


def _detail(rel: str, a: bytes, b: bytes) -> str:
    if rel.endswith(".npy"):
        detail = _array_detail(a, b)
        if detail is not None:
            return detail
    try:
        text_a, text_b = a.decode("utf-8"), b.decode("utf-8")
    except UnicodeDecodeError:
        text_a = text_b = None
    if text_a is not None and text_b is not None:
        lines_a, lines_b = text_a.splitlines(), text_b.splitlines()
        for i, (x, y) in enumerate(zip(lines_a, lines_b), start=1):
            if x != y:
                return f"line {i}: A {_cut(x)!r} B {_cut(y)!r}"
        n = min(len(lines_a), len(lines_b))
        if len(lines_a) != len(lines_b):
            return f"line {n + 1}: A has {len(lines_a)} lines, B {len(lines_b)}"
        return "same lines, different line endings or final newline"
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"byte {first} first differs ({len(a)} B vs {len(b)} B)"


def _array_detail(a: bytes, b: bytes) -> str | None:
    """The first differing index and the largest absolute difference of two .npy files
    (None: either is not a readable array)."""
    try:
        x = np.load(io.BytesIO(a), allow_pickle=False)
        y = np.load(io.BytesIO(b), allow_pickle=False)
    except (ValueError, OSError, EOFError):
        return None
    if x.shape != y.shape or x.dtype != y.dtype:
        return f"array A {x.dtype}{list(x.shape)} vs B {y.dtype}{list(y.shape)}"
    if x.dtype.kind in "biuf":
        wide = np.float64 if x.dtype.kind == "f" else np.int64 if x.dtype.kind in "bi" else np.uint64
        xa, ya = x.astype(wide), y.astype(wide)
        differs = ~((xa == ya) | (np.isnan(xa) & np.isnan(ya))) if x.dtype.kind == "f" else xa != ya
        if not differs.any():
            return f"array {x.dtype}{list(x.shape)}: equal values, different bytes (header or NaN payloads)"
        first = tuple(int(i) for i in np.unravel_index(int(np.argmax(differs)), x.shape))
        gap = np.abs(xa[differs].astype(np.float64) - ya[differs].astype(np.float64))
        return (f"array {x.dtype}{list(x.shape)}: {int(differs.sum())} of {x.size} values differ, first at "
                f"index {list(first)} (A {x[first].item()!r} B {y[first].item()!r}), max abs difference {float(np.nanmax(gap)):.6g}")
    differs = x != y
    first = tuple(int(i) for i in np.unravel_index(int(np.argmax(differs)), x.shape)) if differs.any() else None
    return f"array {x.dtype}{list(x.shape)}: first differing index {list(first) if first else '(none)'}"


def _cut(text: str, n: int = 80) -> str:
    return text if len(text) <= n else text[:n] + "…"
