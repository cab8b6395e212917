"""Evidence made outside dse, read into metrics: RTL pmctrace NDJSON and measurement CSVs.

Parsers only read and check; `Store.import_evidence` writes. Every problem with a file
is an InputError naming the file, the line and field, the value and what is allowed, so
a bad file writes nothing.

**pmctrace NDJSON** (the framework's Verilator trace, `bdb.ndjson`): one JSON object per
line. The performance-counter lines are

    {"type":"pmctrace","clk":1200,"event":"ball","ball_id":0,"rob_id":3,"elapsed":412}
    {"type":"pmctrace","clk":1310,"event":"load","rob_id":4,"elapsed":96}
    {"type":"pmctrace","clk":1400,"event":"store","rob_id":5,"elapsed":80}

logged when an instruction completes, `elapsed` cycles after it was issued. `type` may be
missing (as in HARDWARE.md's example); lines of other trace types (itrace, mtrace,
ctrace, banktrace) in the same file are skipped and counted. The metrics, all of the
kind given on import:

- total: `latency_cycles` (first issue to last completion, max(clk) - min(clk - elapsed);
  only when every line has `clk`), `ball_busy_cycles` and `ball_ops`, `load_busy_cycles`
  and `load_ops`, `store_busy_cycles` and `store_ops` (sums of `elapsed`, and counts);
- per Ball (scope "ball", key = ball_id): `busy_cycles`, `ops`, `max_op_cycles`.

Busy cycles add up per-instruction latencies, which overlap in the reorder buffer, so
they are not a wall-clock figure; `latency_cycles` is.

**CSV** (e.g. FPGA cycle counts): a header row, then one row per measured figure.
Columns `name` and `value` are required; `unit` (default "cycles"), `scope` (default
"total") and `scope_key` (empty for "total", required otherwise) are optional. Blank
rows and rows whose first cell starts with "#" are skipped. A name given twice at the
same scope and key is refused: import repeated measurements as separate files.

**Component tables** (kinds `synth_area` and `power`: a synthesis or power report, by
component): a CSV with a header ``component,value[,unit]`` and one row a component, or a
JSON object ``{"component": value, ...}`` in the kind's own unit. Components are named as
in `dse.ppa.components.COMPONENTS` (each the candidate's whole holding of it: every
private bank, every core, ...), and a ``total`` row may give the whole design's figure.
`synth_area` is area in mm2 (a CSV row may say ``um2``); `power` is the average power over
the candidate's run in mW (a row may say ``uW`` or ``W``). Metrics: ``area_mm2`` (mm2) or
``power_mw`` (mW), scope "component" keyed by the component, the total row at scope
"total". A value must be a finite number above 0 and at most `COMPONENT_LIMITS`' bound
(an area past ten reticles, a power past a kilowatt, is a wrong unit or a typo).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dse.errors import InputError
from dse.ppa.calibration import PPA_EVIDENCE
from dse.ppa.names import COMPONENTS
from dse.records.schema import METRIC_SCOPES

FORMATS = ("auto", "pmctrace", "csv", "json")
PMC_EVENTS = ("ball", "load", "store")
CSV_COLUMNS = ("name", "value", "unit", "scope", "scope_key")

# The imported kinds that are a table of figures by component (the metric each becomes and
# its unit: `dse.ppa.calibration.PPA_EVIDENCE`): the units a CSV row may give (-> factor to
# the kind's unit) and the largest value believed.
COMPONENT_KINDS = tuple(PPA_EVIDENCE)
COMPONENT_UNITS = {"synth_area": {"mm2": 1.0, "mm^2": 1.0, "um2": 1e-6, "um^2": 1e-6},
                   "power": {"mW": 1.0, "uW": 1e-3, "W": 1e3}}
COMPONENT_LIMITS = {"synth_area": 1e4, "power": 1e6}  # mm2 (ten 858 mm2 reticles and more), mW (1 kW)
COMPONENT_COLUMNS = ("component", "value", "unit")
TOTAL = "total"


def formats_for(kind: str) -> tuple[str, ...]:
    """The --format values an imported kind may be read as."""
    return ("auto", "csv", "json") if kind in COMPONENT_KINDS else ("auto", "pmctrace", "csv")


@dataclass
class ParsedEvidence:
    format: str
    metrics: list[dict[str, Any]]
    media_type: str
    role: str
    summary: dict[str, Any] = field(default_factory=dict)


def parse_evidence(path: str | os.PathLike[str], kind: str, fmt: str = "auto") -> ParsedEvidence:
    """Read `path` as `fmt` (auto: by extension, else by its first non-blank character)."""
    allowed = formats_for(kind)
    if fmt not in allowed:
        raise InputError(path, "--format", fmt, f"{', '.join(allowed)} (for --kind {kind})")
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise InputError(path, "FILE", os.fspath(path), f"a readable file ({error.strerror})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(path, "encoding", f"byte {error.start}", "UTF-8 text") from None
    if kind in COMPONENT_KINDS:
        return _parse_components(path, kind, text, fmt)
    if fmt == "auto":
        fmt = _guess_format(path, text)
    if fmt == "pmctrace":
        return _parse_pmctrace(path, kind, text)
    return _parse_csv(path, kind, text)


def _guess_format(path: str | os.PathLike[str], text: str) -> str:
    suffix = Path(path).suffix.lower()
    if suffix in (".ndjson", ".jsonl", ".json", ".log"):
        return "pmctrace"
    if suffix in (".csv", ".tsv"):
        return "csv"
    stripped = text.lstrip()
    if not stripped:
        raise InputError(path, "FILE", "(empty)", "pmctrace NDJSON or a CSV of measurements")
    return "pmctrace" if stripped.startswith("{") else "csv"


def _count(path: Any, where: str, record: dict[str, Any], key: str) -> int:
    value = record.get(key)
    # bool is an int in Python, never a cycle count.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(path, f"{where}: {key}", value, "a whole number >= 0")
    return value


def _parse_pmctrace(path: Any, kind: str, text: str) -> ParsedEvidence:
    ball_busy: dict[int, int] = defaultdict(int)
    ball_ops: dict[int, int] = defaultdict(int)
    ball_max: dict[int, int] = defaultdict(int)
    mem_busy = {"load": 0, "store": 0}
    mem_ops = {"load": 0, "store": 0}
    first_issue: int | None = None
    last_done: int | None = None
    every_line_clocked = True
    events = skipped = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(
                path, where, _clip(line), f"one JSON object per line ({error.msg})"
            ) from None
        if not isinstance(record, dict):
            raise InputError(path, where, _clip(line), "one JSON object per line")
        trace_type = record.get("type", "pmctrace")
        if trace_type != "pmctrace":
            skipped += 1
            continue
        event = record.get("event")
        if event not in PMC_EVENTS:
            raise InputError(path, f"{where}: event", event, ", ".join(PMC_EVENTS))
        _count(path, where, record, "rob_id")
        elapsed = _count(path, where, record, "elapsed")
        if "clk" in record:
            clk = _count(path, where, record, "clk")
            issued = clk - elapsed
            first_issue = issued if first_issue is None else min(first_issue, issued)
            last_done = clk if last_done is None else max(last_done, clk)
        else:
            every_line_clocked = False
        if event == "ball":
            ball = _count(path, where, record, "ball_id")
            ball_busy[ball] += elapsed
            ball_ops[ball] += 1
            ball_max[ball] = max(ball_max[ball], elapsed)
        else:
            mem_busy[event] += elapsed
            mem_ops[event] += 1
        events += 1
    if events == 0:
        raise InputError(
            path, "pmctrace lines", 0,
            'at least one {"type":"pmctrace","event":"ball"|"load"|"store",...} line',
        )  # fmt: skip

    def metric(name: str, value: float, unit: str, scope: str = "total", key: str = "") -> dict:
        return dict(kind=kind, name=name, value=float(value), unit=unit, scope=scope, scope_key=key)

    metrics = []
    if every_line_clocked and first_issue is not None and last_done is not None:
        metrics.append(metric("latency_cycles", last_done - first_issue, "cycles"))
    metrics += [
        metric("ball_busy_cycles", sum(ball_busy.values()), "cycles"),
        metric("ball_ops", sum(ball_ops.values()), "ops"),
        metric("load_busy_cycles", mem_busy["load"], "cycles"),
        metric("load_ops", mem_ops["load"], "ops"),
        metric("store_busy_cycles", mem_busy["store"], "cycles"),
        metric("store_ops", mem_ops["store"], "ops"),
    ]
    for ball in sorted(ball_ops):
        key = str(ball)
        metrics += [
            metric("busy_cycles", ball_busy[ball], "cycles", "ball", key),
            metric("ops", ball_ops[ball], "ops", "ball", key),
            metric("max_op_cycles", ball_max[ball], "cycles", "ball", key),
        ]
    summary = {"pmctrace_lines": events, "other_lines_skipped": skipped, "balls": len(ball_ops)}
    return ParsedEvidence("pmctrace", metrics, "application/x-ndjson", "trace", summary)


def _parse_csv(path: Any, kind: str, text: str) -> ParsedEvidence:
    dialect = "excel-tab" if Path(path).suffix.lower() == ".tsv" else "excel"
    reader = csv.reader(io.StringIO(text, newline=""), dialect=dialect)
    header: list[str] | None = None
    metrics: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, str], int] = {}
    for row in reader:
        number = reader.line_num
        if not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        cells = [cell.strip() for cell in row]
        if header is None:
            header = [cell.lower() for cell in cells]
            unknown = [c for c in header if c not in CSV_COLUMNS]
            if unknown or "name" not in header or "value" not in header:
                raise InputError(
                    path, f"line {number}: header", ",".join(cells),
                    "columns name, value (required) and unit, scope, scope_key (optional)",
                )  # fmt: skip
            if len(set(header)) != len(header):
                raise InputError(path, f"line {number}: header", ",".join(cells), "each column once")
            continue
        if len(cells) != len(header):
            raise InputError(
                path, f"line {number}", ",".join(cells), f"{len(header)} cells ({','.join(header)})"
            )
        record = dict(zip(header, cells))
        where = f"line {number}"
        name = record["name"]
        if not name:
            raise InputError(path, f"{where}: name", name, "a non-empty metric name")
        try:
            value = float(record["value"])
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise InputError(path, f"{where}: value", record["value"], "a finite number")
        unit = record.get("unit") or "cycles"
        scope = record.get("scope") or "total"
        if scope not in METRIC_SCOPES:
            raise InputError(path, f"{where}: scope", scope, ", ".join(METRIC_SCOPES))
        scope_key = record.get("scope_key", "")
        if (scope == "total") != (scope_key == ""):
            raise InputError(
                path, f"{where}: scope_key", scope_key,
                "empty for scope 'total', the op/core/Ball/bank it measures otherwise",
            )  # fmt: skip
        key = (name, scope, scope_key)
        if key in seen:
            raise InputError(
                path, f"{where}: name", name,
                f"each name once per scope and key (also on line {seen[key]}); "
                "import repeated measurements as separate files",
            )  # fmt: skip
        seen[key] = number
        metrics.append(
            dict(kind=kind, name=name, value=value, unit=unit, scope=scope, scope_key=scope_key)
        )
    if header is None:
        raise InputError(path, "header", "(none)", "a header row: name,value[,unit,scope,scope_key]")
    if not metrics:
        raise InputError(path, "rows", 0, "at least one measurement row under the header")
    return ParsedEvidence("csv", metrics, "text/csv", "measurements", {"rows": len(metrics)})


def _parse_components(path: Any, kind: str, text: str, fmt: str) -> ParsedEvidence:
    """A component table (see the module's notes): CSV or JSON, by `fmt` or else by the
    extension, else by the first non-blank character."""
    what = "a CSV (component,value[,unit]) or a JSON object {component: value}"
    stripped = text.strip()
    if not stripped:
        raise InputError(path, "FILE", "(empty)", what)
    if fmt == "auto":
        suffix = Path(path).suffix.lower()
        fmt = ("json" if suffix == ".json" else "csv" if suffix in (".csv", ".tsv")
               else "json" if stripped[0] in "{[" else "csv")
    name, unit = PPA_EVIDENCE[kind].metric, PPA_EVIDENCE[kind].unit
    limit = COMPONENT_LIMITS[kind]
    allowed_names = f"a component of {', '.join(COMPONENTS)}, or {TOTAL}"

    def checked(where: str, component: str, value: Any, raw: Any, scale: float = 1.0) -> float:
        if component not in COMPONENTS and component != TOTAL:
            raise InputError(path, f"{where}: component", component, allowed_names)
        try:
            number = math.nan if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)
        except OverflowError:  # an int past float's range
            number = math.inf
        if not math.isfinite(number):
            raise InputError(path, f"{where}: value", raw, f"a finite number of {unit}")
        value = number * scale
        if not 0 < value <= limit:
            raise InputError(path, f"{where}: value", raw, f"a number above 0 and at most {limit:g} {unit} (the "
                             f"candidate's {'area' if kind == 'synth_area' else 'average power'}; more is a wrong "
                             "unit or a typo)")
        return value

    figures: dict[str, tuple[float, str]] = {}  # component -> value, where it was given
    if fmt == "json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            lines = text.splitlines()
            shown_line = lines[error.lineno - 1] if error.lineno <= len(lines) else stripped
            raise InputError(path, f"line {error.lineno}", _clip(shown_line), f"{what} ({error.msg})") from None
        except RecursionError:
            raise InputError(path, "JSON", _clip(stripped), f"{what} (nested too deeply)") from None
        if not isinstance(data, dict) or not data:
            raise InputError(path, "JSON", _clip(stripped), f"{what}, with at least one component")
        for component, value in data.items():
            where = f"key '{component}'"
            figures[component] = (checked(where, component, value, value), where)
        fmt_name, media = "json", "application/json"
    else:
        dialect = "excel-tab" if Path(path).suffix.lower() == ".tsv" else "excel"
        reader = csv.reader(io.StringIO(text, newline=""), dialect=dialect)
        header: list[str] | None = None
        for row in reader:
            number = reader.line_num
            if not any(cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
                continue
            cells = [cell.strip() for cell in row]
            if header is None:
                header = [cell.lower() for cell in cells]
                if (any(c not in COMPONENT_COLUMNS for c in header) or "component" not in header
                        or "value" not in header or len(set(header)) != len(header)):
                    raise InputError(path, f"line {number}: header", _clip(",".join(cells)),
                                     "columns component, value (required) and unit (optional), each once")
                continue
            if len(cells) > len(header):
                raise InputError(path, f"line {number}", _clip(",".join(cells)),
                                 f"at most {len(header)} cells ({','.join(header)})")
            record = dict(zip(header, cells + [""] * (len(header) - len(cells))))  # a unit left out: the kind's
            where = f"line {number}"
            units = COMPONENT_UNITS[kind]
            given_unit = record.get("unit") or unit
            if given_unit not in units:
                raise InputError(path, f"{where}: unit", given_unit, f"{', '.join(units)} ({kind})")
            try:
                value = float(record["value"])
            except ValueError:
                value = math.nan
            component = record["component"]
            if component in figures:
                raise InputError(path, f"{where}: component", component,
                                 f"each component once (also {figures[component][1]}); "
                                 "import repeated measurements as separate files")
            figures[component] = (checked(where, component, value, record["value"], units[given_unit]), where)
        if header is None:
            raise InputError(path, "header", "(none)", "a header row: component,value[,unit]")
        if not figures:
            raise InputError(path, "rows", 0, "at least one component row under the header")
        fmt_name, media = "csv", "text/csv"
    metrics = [dict(kind=kind, name=name, value=value, unit=unit, scope="total" if c == TOTAL else "component",
                    scope_key="" if c == TOTAL else c) for c, (value, _) in figures.items()]
    summary = {"components": sum(c != TOTAL for c in figures), "total": int(TOTAL in figures)}
    return ParsedEvidence(fmt_name, metrics, media, "measurements", summary)


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
