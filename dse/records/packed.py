"""A run's metrics packed into one row (0015): run_metrics (run_id -> layout_id, figures),
`figures` the run's values as little-endian float64 in recorded order, and metric_layout,
what each value is ([kind, name, unit, scope, scope_key] each, as JSON text), stored once
per distinct layout (a sweep's runs nearly all share one). A sweep's candidate is one row
here instead of fifty metric rows; every reader unpacks through this module (or
`sql_reads.unpacked`, the same for the light reads), in the recorded order the metric
rows' ids gave.

latest_figures stays beside them (dse.records.latest): each candidate's latest totals of
each kind, what the wide tables and the UI's page read.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import struct
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Connection

from dse.records.driver import executor
from dse.records.sql_reads import FIGURES_BYTE_ORDER, layout_entries, unpack_entries as unpack

# What a layout's entries hold, in order (a metric row's columns but run_id and value).
LAYOUT_FIELDS = ("kind", "name", "unit", "scope", "scope_key")
_CHUNK = 500  # ids per IN list: under every driver's bound-parameter limit
_ROWS_PER_INSERT = 100


def layout_text(kinds: Sequence[str], names: Sequence[str], units: Sequence[str], scopes: Sequence[str],
                keys: Sequence[str]) -> str:
    """A layout as stored: the JSON list of [kind, name, unit, scope, scope_key] entries."""
    return json.dumps([list(entry) for entry in zip(kinds, names, units, scopes, keys)])


def layout_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write(connection: Connection, packs: Sequence[tuple]) -> None:
    """Runs' metrics, (run_id, shape, values) each (`checks.Pack`: checked already, a run
    not holding metrics yet), as one run_metrics row per run."""
    # id(shape) -> (its layout's text, its packer), made once a batch: a batch's runs share
    # shape objects (kept alive by `packs`), found by identity, not by hashing sixty names.
    made: dict[int, tuple[str, struct.Struct]] = {}
    rows = []
    for run_id, shape, values in packs:
        found = made.get(id(shape))
        if found is None:
            found = made[id(shape)] = (layout_text(*shape), struct.Struct(f"{FIGURES_BYTE_ORDER}{len(shape[0])}d"))
        rows.append((int(run_id), found[0], found[1].pack(*values)))
    # new layouts numbered in order of first use
    ids = layout_ids(connection, list(dict.fromkeys(text for text, _ in made.values())))
    mark = _mark(connection)
    one = f"({mark}, {mark}, {mark})"
    execute = executor(connection)
    for i in range(0, len(rows), _ROWS_PER_INSERT):
        part = rows[i:i + _ROWS_PER_INSERT]
        execute("INSERT INTO run_metrics (run_id, layout_id, figures) VALUES " + ", ".join([one] * len(part)),
                tuple(itertools.chain.from_iterable((run_id, ids[text], figures) for run_id, text, figures in part)))


def layout_ids(connection: Connection, texts: Iterable[str], table: str = "metric_layout") -> dict[str, int]:
    """text -> id of each layout in `table` (metric_layout, or latest_figures' figures_layout,
    0019: both (id, hash, layout)), stored now if the store lacks it (a concurrent writer's
    copy of the same layout is taken: the hash is unique)."""
    hashes = {layout_hash(t): t for t in texts}  # (in the order given)
    if not hashes:
        return {}
    found = _ids_of(connection, list(hashes), table)
    missing = [h for h in hashes if h not in found]
    if missing:
        mark = _mark(connection)
        connection.exec_driver_sql(
            f"INSERT INTO {table} (hash, layout) VALUES ({mark}, {mark}) ON CONFLICT (hash) DO NOTHING",
            [(h, hashes[h]) for h in missing])
        found.update(_ids_of(connection, missing, table))
    return {hashes[h]: i for h, i in found.items()}


def _ids_of(connection: Connection, hashes: list[str], table: str) -> dict[str, int]:
    out: dict[str, int] = {}
    mark = _mark(connection)
    for i in range(0, len(hashes), _CHUNK):
        part = hashes[i:i + _CHUNK]
        out.update((h, int(i_)) for i_, h in connection.exec_driver_sql(
            f"SELECT id, hash FROM {table} WHERE hash IN ({', '.join([mark] * len(part))})", tuple(part)))
    return out


# Layouts by id (ints only, written into the SQL).
LAYOUTS = "SELECT id, layout FROM metric_layout WHERE id IN ({ids})"


def layouts(source: Any, ids: Iterable[int]) -> dict[int, list[tuple]]:
    """layout id -> its entries, (kind, name, unit, scope, scope_key) each. `source`: a
    connection, or a reader's way of running SQL (`sql_reads.Run`)."""
    wanted = sorted({int(i) for i in ids})
    out: dict[int, list[tuple]] = {}
    for i in range(0, len(wanted), _CHUNK):
        sql = LAYOUTS.format(ids=", ".join(map(str, wanted[i:i + _CHUNK])))
        rows = source(sql, {})[1] if callable(source) else source.exec_driver_sql(sql)
        out.update((int(ident), layout_entries(text)) for ident, text in rows)
    return out


def explode(source: Any, frame: Any, kinds: Sequence[str] | None = None, scope: str | None = None,
            names: Sequence[str] | None = None, scopes: Sequence[str] | None = None) -> Any:
    """`frame` (a pandas DataFrame with columns layout_id and figures, one row per run) in
    long form: each row repeated once per metric of its layout (of these kinds, scope or
    scopes and names when given), with columns kind, name, value, unit, scope, scope_key
    in place of layout_id and figures; rows in the frame's order, each run's metrics in
    recorded order (as the metric rows' ids ordered them). `source`: what `layouts` reads
    the layouts through."""
    import numpy as np
    import pandas as pd

    other = [c for c in frame.columns if c not in ("layout_id", "figures")]
    columns = [*other, "kind", "name", "value", "unit", "scope", "scope_key"]
    if frame.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64" if c == "value" else object) for c in columns})
    codes, ids = pd.factorize(frame["layout_id"].astype("int64"))
    held = layouts(source, ids)
    figures = frame["figures"].to_numpy()
    wanted_scopes = set(scopes) if scopes is not None else ({scope} if scope is not None else None)
    pieces, order = [], []
    for code, ident in enumerate(ids):
        entries = held[int(ident)]
        at = np.flatnonzero(codes == code)
        keep = [j for j, (k, n, _, s, _) in enumerate(entries)
                if (kinds is None or k in kinds) and (wanted_scopes is None or s in wanted_scopes)
                and (names is None or n in names)]
        if not keep:
            continue
        values = np.frombuffer(b"".join(bytes(f) for f in figures[at]), dtype=FIGURES_BYTE_ORDER + "f8")
        values = values.reshape(len(at), len(entries))[:, keep]
        piece = frame.iloc[np.repeat(at, len(keep)), [frame.columns.get_loc(c) for c in other]].reset_index(drop=True)
        chosen = [entries[j] for j in keep]
        for f, field in enumerate(LAYOUT_FIELDS):
            piece[field] = np.tile(np.array([e[f] for e in chosen], dtype=object), len(at))
        piece["value"] = values.reshape(-1)
        pieces.append(piece)
        # each long row's place: its run's row in the frame, then its position in the run
        order.append(np.repeat(at, len(keep)) * (1 << 20) + np.tile(np.array(keep, dtype=np.int64), len(at)))
    if not pieces:
        return explode(source, frame.iloc[:0], kinds, scope, names, scopes)
    long = pd.concat(pieces, ignore_index=True)
    long = long.iloc[np.argsort(np.concatenate(order), kind="stable")].reset_index(drop=True)
    return long[columns]


def rows_of(connection: Connection, run_ids: Sequence[int], scope: str | None = None) -> list[tuple]:
    """(run_id, kind, name, value, unit, scope, scope_key) rows of these runs' own metrics
    (not through a link), by run as given and as recorded."""
    mark = _mark(connection)
    out = []
    for i in range(0, len(run_ids), _CHUNK):
        part = [int(r) for r in run_ids[i:i + _CHUNK]]
        packs = {int(r): (int(l), bytes(f)) for r, l, f in connection.exec_driver_sql(
            f"SELECT run_id, layout_id, figures FROM run_metrics WHERE run_id IN ({', '.join([mark] * len(part))})",
            tuple(part))}
        held = layouts(connection, {l for l, _ in packs.values()})
        for run_id in part:
            if run_id not in packs:
                continue
            ident, figures = packs[run_id]
            out += [(run_id, *row) for row in unpack(held[ident], figures) if scope is None or row[4] == scope]
    return out


def _mark(connection: Connection) -> str:
    return "?" if connection.dialect.paramstyle == "qmark" else "%s"
