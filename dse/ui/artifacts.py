"""Artifact viewers: a run's evidence files looked at in the browser, not only downloaded.

- arrays (.npy): shape, dtype, min / max / mean / std and the NaN count, and a heat map of
  a 2-D slice (the leading axes at the indices `?at=` names, 0 by default), every k-th row
  and column when it is larger than `HEATMAP_CELLS` a side;
- counters (counters.json, the emulator's rows): a table, filterable by text;
- logs and text (NDJSON traces, frontend dumps, a run's JSON log): preformatted text.

No file is read whole into memory: an array is memory-mapped and its statistics are
accumulated chunk by chunk over at most `MAX_STATS_ELEMENTS` elements; text shows its first
`MAX_TEXT_BYTES`; counters are parsed up to `MAX_JSON_BYTES` and listed up to
`MAX_TABLE_ROWS` rows. Each page says when it stopped at a cap, and links the download.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
from starlette.requests import Request
from starlette.responses import Response

from ..records import RecordNotFound
from ..records.blobs import EvidenceError, open_verified
from .params import record_id
from .queries import BadQuery
from .responses import Problem, figure_response

if TYPE_CHECKING:
    from .app import Workbench

MAX_TEXT_BYTES = 256 * 1024  # of a log or text shown
MAX_JSON_BYTES = 8 * 2**20  # of a counters file parsed into a table
MAX_TABLE_ROWS = 2000  # counter rows listed
MAX_STATS_ELEMENTS = 64 * 2**20  # array elements the statistics read (in chunks)
STATS_CHUNK = 2**20  # elements converted to float64 at a time (8 MiB)
HEATMAP_CELLS = 200  # rows and columns of the heat map, at most
# The counters' columns in this order first (the rest after, as found; the event last).
COUNTER_COLUMNS = ("name", "value", "unit", "scope")


def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


# ---- arrays ------------------------------------------------------------------------------


@dataclass
class ArrayStats:
    count: int = 0  # non-NaN values read
    nan: int = 0
    low: float = math.inf
    high: float = -math.inf
    mean: float = 0.0
    m2: float = 0.0  # sum of squared deviations (Chan et al.'s parallel update)
    read: int = 0  # elements read (all of them, unless capped)

    def add(self, chunk: np.ndarray) -> None:
        values = chunk.astype(np.float64, copy=False)
        nans = np.isnan(values)
        n_nan = int(nans.sum())
        if n_nan:
            values = values[~nans]
        self.nan += n_nan
        self.read += len(chunk)
        n = len(values)
        if not n:
            return
        mean = float(values.mean())
        m2 = float(((values - mean) ** 2).sum())
        self.low, self.high = min(self.low, float(values.min())), max(self.high, float(values.max()))
        total = self.count + n
        delta = mean - self.mean
        self.mean += delta * n / total
        self.m2 += m2 + delta * delta * self.count * n / total
        self.count = total

    @property
    def std(self) -> float:
        """The population standard deviation (numpy's default, ddof=0)."""
        return math.sqrt(self.m2 / self.count) if self.count else math.nan


@dataclass
class ArrayView:
    shape: tuple[int, ...]
    dtype: str
    order: str  # "C" or "F"
    stats: ArrayStats | None  # None: not numbers (strings, records)
    note: str = ""  # what the statistics stand for ("|x| of complex values"), caps reached
    slice_axes: tuple[int, ...] = ()  # the indices of the leading axes the heat map shows
    problems: list[str] = field(default_factory=list)


def open_array(path: Path) -> np.ndarray:
    """The .npy file memory-mapped (read-only; nothing loaded), never unpickled."""
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as error:
        if "empty" in str(error) or "size 0" in str(error):  # a zero-size array cannot be mapped
            with open(path, "rb") as f:
                version = np.lib.format.read_magic(f)
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
                shape, fortran, dtype = read(f)
            return np.empty(shape, dtype=dtype, order="F" if fortran else "C")
        raise


def _flat(arr: np.ndarray) -> np.ndarray:
    """The elements in memory order without copying (a Fortran-order file too)."""
    return arr.reshape(-1, order="F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C")


def array_view(path: Path) -> ArrayView:
    arr = open_array(path)
    order = "F" if arr.flags.f_contiguous and not arr.flags.c_contiguous else "C"
    view = ArrayView(tuple(int(s) for s in arr.shape), str(arr.dtype), order, None)
    kind = arr.dtype.kind
    if kind not in "biufc":
        view.note = f"no statistics: {arr.dtype} values are not numbers"
        return view
    stats = ArrayStats()
    flat = _flat(arr)
    upto = min(flat.size, MAX_STATS_ELEMENTS)
    for start in range(0, upto, STATS_CHUNK):
        chunk = np.asarray(flat[start:min(start + STATS_CHUNK, upto)])
        stats.add(np.abs(chunk) if kind == "c" else chunk)
    view.stats = stats
    notes = []
    if kind == "c":
        notes.append("statistics of |x| (the values are complex)")
    if upto < flat.size:
        notes.append(f"statistics of the first {upto:,} of {flat.size:,} elements (capped at "
                     f"{MAX_STATS_ELEMENTS:,} read; download the file for all)")
    view.note = "; ".join(notes)
    return view


def parse_at(text: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The indices of the leading axes (all but the last two) from `?at=1,0`: each within
    its axis; missing ones are 0."""
    lead = shape[:-2] if len(shape) > 2 else ()
    if not text.strip():
        return tuple(0 for _ in lead)
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > len(lead) or not all(p.isascii() and p.isdigit() and len(p) <= 18 for p in parts):
        raise BadQuery("at", text, f"{len(lead)} comma-separated indices of the leading axes {list(lead)}"
                       if lead else "nothing: the array has no leading axes to pick")
    at = [int(p) for p in parts] + [0] * (len(lead) - len(parts))
    for axis, (i, n) in enumerate(zip(at, lead)):
        if i >= n:
            raise BadQuery("at", text, f"axis {axis} index below {n}")
    return tuple(at)


@dataclass
class HeatSlice:
    z: np.ndarray  # float64, at most HEATMAP_CELLS a side
    steps: tuple[int, int]  # every steps[0]-th row and steps[1]-th column
    rows: int  # of the full slice
    cols: int
    label: str  # "[1, 0, :, :]"


def heat_steps(rows: int, cols: int) -> tuple[int, int]:
    """The heat map's stride along the rows and the columns of a `rows` x `cols` slice."""
    return max(1, math.ceil(rows / HEATMAP_CELLS)), max(1, math.ceil(cols / HEATMAP_CELLS))


def heatmap_height(shown_rows: int) -> int:
    """The heat map's height, from the rows it shows: the figure sets it, the artifact's
    page reserves it before the figure arrives."""
    return min(700, 180 + 4 * max(40, shown_rows))


def heatmap_height_of(shape: tuple[int, ...]) -> int:
    """`heatmap_height` of an array of `shape` (its slices, `heat_slice`'s, all alike)."""
    rows = shape[-2] if len(shape) >= 2 else 1
    return heatmap_height(math.ceil(rows / heat_steps(rows, 1)[0]))


def heat_slice(arr: np.ndarray, at: tuple[int, ...]) -> HeatSlice | None:
    """The 2-D slice the heat map shows (a 1-D array as one row), downsampled by stride;
    None for a 0-d array or one of no numbers."""
    if arr.ndim == 0 or arr.dtype.kind not in "biufc":
        return None
    plane = arr[at] if arr.ndim > 2 else arr
    plane = plane.reshape(1, -1) if plane.ndim == 1 else plane
    rows, cols = plane.shape
    steps = heat_steps(rows, cols)
    z = np.asarray(plane[::steps[0], ::steps[1]])
    z = np.abs(z) if z.dtype.kind == "c" else z
    label = "[" + ", ".join([*(str(i) for i in at), ":", ":"]) + "]" if arr.ndim > 2 else ""
    return HeatSlice(z.astype(np.float64), steps, rows, cols, label)


# ---- counters and text ------------------------------------------------------------------


@dataclass
class CounterTable:
    columns: list[str]
    rows: list[list[Any]]
    total: int  # rows in the file (matching the filter)
    shown: int


def counter_table(data: Any, text: str = "") -> CounterTable | None:
    """The emulator's counter rows as a table (None when `data` is not a list of rows);
    `text`: keep the rows where some cell contains it (case-insensitive)."""
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data) or not data:
        return None
    found = dict.fromkeys(k for r in data for k in r)
    columns = [c for c in COUNTER_COLUMNS if c in found] + [c for c in found if c not in COUNTER_COLUMNS
                                                            and c != "event"] + (["event"] if "event" in found else [])
    needle = text.strip().lower()
    kept = [r for r in data if not needle or any(needle in str(v).lower() for v in r.values())]
    rows = [[_cell(r.get(c)) for c in columns] for r in kept[:MAX_TABLE_ROWS]]
    return CounterTable(columns, rows, len(kept), len(rows))


def _cell(value: Any) -> str:
    """A counter's cell: whole numbers exact ("12,730,725"), others to six digits."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.6g}"
    return f"{int(value):,}"


def read_head(path: Path, limit: int) -> tuple[bytes, int]:
    """The first `limit` bytes of a file and its size."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        return f.read(limit), size


def viewer_of(row: dict) -> str:
    """Which viewer shows an artifact: array, counters, json, text or none."""
    name = str(row.get("name") or "").lower()
    media = str(row.get("media_type") or "")
    if name.endswith(".npy"):
        return "array"
    if name.endswith("counters.json"):
        return "counters"
    if name.endswith(".json") or media == "application/json":
        return "json"
    if media.startswith("text/") or name.endswith((".txt", ".ndjson", ".log", ".csv", ".toml", ".md")):
        return "text"
    return "none"


# ---- the routes ------------------------------------------------------------------------------


def _artifact(bench: Workbench, request: Request) -> tuple[dict, Path]:
    ident = record_id(request.path_params["ident"], what="artifact")
    try:
        row = bench.store.artifact(ident)
    except RecordNotFound as error:
        raise Problem(404, "No such artifact", str(error)) from None
    if bench.store.evidence_dir is None:
        raise Problem(410, "Artifact file missing", f"artifact {ident}: the store has no evidence folder")
    try:  # re-hashed before it is shown, as the download route does; a link is never followed
        open_verified(bench.store.evidence_dir, row["sha256"]).close()
    except EvidenceError as error:
        status, title = {"missing": (410, "Artifact file missing"), "altered": (409, "Artifact file altered"),
                         "refused": (403, "Artifact file refused")}[error.state.state]
        raise Problem(status, title, f"artifact {ident}: {error}") from None
    return row, Path(row["path"])


def view(bench: Workbench, request: Request) -> Response:
    """GET /artifacts/{id}/view: the artifact in its viewer, with its download link."""

    row, path = _artifact(bench, request)
    kind = viewer_of(row)
    context: dict[str, Any] = {"kind": kind, "art": row, "size_text": _size(int(row["size"]))}
    run = bench.store.run_row(int(row["run_id"])) if row["run_id"] is not None else None
    context["run"] = run
    context["exp"] = bench.store.experiment(int(row["experiment_id"])) if row["experiment_id"] is not None else None
    if kind == "array":
        try:
            arr_view = array_view(path)
        except (ValueError, OSError) as error:
            raise Problem(422, "Not a readable array", f"artifact {row['id']} ({row['name']}): {error}") from None
        context["array"] = arr_view
        at_text = request.query_params.get("at", "")
        context["at"] = parse_at(at_text, arr_view.shape)
        context["lead"] = arr_view.shape[:-2] if len(arr_view.shape) > 2 else ()
        context["heatmap"] = len(arr_view.shape) > 0 and arr_view.stats is not None and math.prod(arr_view.shape) > 0
        context["heights"] = {"heatmap": heatmap_height_of(tuple(arr_view.shape))}
    elif kind in ("counters", "json"):
        head, size = read_head(path, MAX_JSON_BYTES + 1)
        data = None
        if size <= MAX_JSON_BYTES:
            try:
                data = json.loads(head)
            except ValueError:
                data = None
        table = counter_table(data, request.query_params.get("q", "")[:200]) if kind == "counters" else None
        context["q"] = request.query_params.get("q", "")[:200]
        context["table"] = table
        if table is None:  # a JSON document (or one too large to parse): as text
            if data is not None and size <= MAX_TEXT_BYTES:
                context["text"], context["cut"] = json.dumps(data, indent=2, sort_keys=False), False
            else:
                context["text"], context["cut"] = head[:MAX_TEXT_BYTES].decode("utf-8", "replace"), size > MAX_TEXT_BYTES
            context["kind"] = "text"
        context["too_big"] = size > MAX_JSON_BYTES
    elif kind == "text":
        head, size = read_head(path, MAX_TEXT_BYTES)
        context["text"], context["cut"] = head.decode("utf-8", "replace"), size > MAX_TEXT_BYTES
    context.update(max_text=_size(MAX_TEXT_BYTES), max_json=_size(MAX_JSON_BYTES), max_rows=MAX_TABLE_ROWS,
                   heatmap_cells=HEATMAP_CELLS)
    return bench.page(request, "artifact.html.j2", title=f"dse: artifact {row['id']}", **context)


def heatmap_json(bench: Workbench, request: Request) -> Response:
    """GET /artifacts/{id}/heatmap.json?at=: the heat map of the array's 2-D slice (a plotly
    figure) and what it shows: the slice, its full size and the downsampling steps."""

    row, path = _artifact(bench, request)
    if viewer_of(row) != "array":
        raise Problem(400, "Not an array", f"artifact {row['id']} ({row['name']}) is not a .npy array")
    try:
        arr = open_array(path)
    except (ValueError, OSError) as error:
        raise Problem(422, "Not a readable array", f"artifact {row['id']} ({row['name']}): {error}") from None
    at = parse_at(request.query_params.get("at", ""), tuple(arr.shape))
    heat = heat_slice(arr, at)
    if heat is None:
        raise Problem(400, "No heat map", f"artifact {row['id']} ({row['name']}) has no 2-D slice of numbers "
                                          f"(shape {tuple(arr.shape)}, dtype {arr.dtype})")
    rows = np.arange(heat.z.shape[0]) * heat.steps[0]
    cols = np.arange(heat.z.shape[1]) * heat.steps[1]
    # As typed arrays (plotly writes numpy arrays base64-encoded): 40,000 cells in 160 kB.
    z = np.where(np.isfinite(heat.z), heat.z, np.nan).astype(np.float32)
    fig = go.Figure(go.Heatmap(z=z, x=cols, y=rows, colorscale="Viridis",
                               hovertemplate="row %{y}, column %{x}: %{z}<extra></extra>"))
    every = ", ".join(f"every {n} {what}s" if n > 1 else f"every {what}"
                      for n, what in zip(heat.steps, ("row", "column")))
    fig.update_layout(title=f"{row['name']}{heat.label}" + (f" ({every})" if heat.steps != (1, 1) else ""),
                      yaxis=dict(autorange="reversed", title="row"), xaxis=dict(title="column"),
                      height=heatmap_height(heat.z.shape[0]), margin=dict(l=60, r=20, t=50, b=50))
    return figure_response(fig, {"slice": heat.label, "rows": heat.rows, "cols": heat.cols,
                                  "steps": list(heat.steps), "shown": list(heat.z.shape)})
