"""latest_figures (0012): each candidate's total metrics of each kind from its latest run
that recorded that kind, packed one row per candidate and kind with the versions of their
run (what metric_table's wide row and the UI's page need, read without a probe per
figure), kept by every write of metrics in the same transaction as the packed metrics.
(latest_metric, 0011, the same figures one row each, went in 0016: the figures once.)

"Latest" is the largest run id, as everywhere in the store: a run that finishes after a
newer run of the same candidate and kind leaves the newer run's figures standing; a newer
run replaces all of the older run's figures of that kind (names it lacks go too). Other
scopes (op, core, ...) are read from the metric rows themselves.
"""

from __future__ import annotations

import itertools
import json
import operator
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection

from dse.records.driver import executor
from dse.records.packed import layout_ids, layouts
from dse.records.sql_reads import FIGURES_BYTE_ORDER

_CHUNK = 500  # ids per IN list: under every driver's bound-parameter limit
_ROWS_PER_INSERT = 100  # 500 parameters a statement (5 columns a row)
# latest_figures.layout_id: what the figures are, the same for a whole sweep's rows: the
# figures_layout (0019) whose text is the JSON list [model_version, emulator_version,
# [names, sorted]] of their run. figures: the values as little-endian float64 in the names'
# order: exact, and unpacked for 100,000 candidates by one numpy call a layout. (One text
# for the three: each column read costs as much; stored once, not in each row.)
# The byte order, FIGURES_BYTE_ORDER, is sql_reads' (whose light read unpacks them too).


def record(connection: Connection, packs: Sequence[tuple],
           runs: Mapping[int, tuple[int, str, str | None]] | None = None) -> None:
    """Bring latest_figures up to date with runs' metrics just written in
    this transaction: (run_id, shape, values) each, as `checks.Pack` (their total scope).
    `runs`: run id -> (candidate id, model version, emulator version) of those runs, when
    the caller has just written them (else read back)."""
    # A sweep's runs share a shape: where its totals of each kind sit, found once a shape
    # (by the shape object's identity: `packs` keeps them alive; hashing one costs 2 us).
    totals_of: dict[int, list[tuple[str, tuple[str, ...], tuple[int, ...]]]] = {}
    totals = []  # (run, kind, names, places, values) of each run and kind with totals
    for run_id, shape, values in packs:
        found = totals_of.get(id(shape))
        if found is None:
            found = totals_of[id(shape)] = _totals_by_kind(shape)
        for kind, names, at in found:
            totals.append((run_id, kind, names, at, values))
    if not totals:
        return
    of_run = runs if runs is not None else _runs(connection, sorted({t[0] for t in totals}))
    newest: dict[tuple[int, str], int] = {}  # (candidate, kind) -> the batch's newest run of it
    for run, kind, *_ in totals:
        pair = (of_run[run][0], kind)
        if newest.get(pair, -1) < run:
            newest[pair] = run
    # Pairs a newer run (already recorded, or a concurrent PostgreSQL writer's) holds keep
    # its figures, older ones are replaced: the upsert's guard, so nothing is read first.
    _put_figures(connection, [(c, kind, run, model_version, emulator_version, names, at, values)
                              for run, kind, names, at, values in totals
                              for c, model_version, emulator_version in (of_run[run],)
                              if newest[(c, kind)] == run])


def _totals_by_kind(shape: tuple) -> list[tuple[str, tuple[str, ...], tuple[int, ...]]]:
    """(kind, names, places) of a shape's total-scope metrics, kind by kind in order of
    first appearance."""
    kinds, names, _, scopes, _ = shape
    by_kind: dict[str, list[int]] = {}
    for i, scope in enumerate(scopes):
        if scope == "total":
            by_kind.setdefault(kinds[i], []).append(i)
    return [(kind, tuple(names[i] for i in at), tuple(at)) for kind, at in by_kind.items()]


def packs_of(rows: Iterable[Sequence]) -> list[tuple]:
    """(run_id, kind, name, value, unit, scope, scope_key) rows as (run_id, shape, values)
    packs, a run's rows in their order."""
    by_run: dict[int, list] = {}
    for row in rows:
        by_run.setdefault(row[0], []).append(row)
    out = []
    for run_id, mine in by_run.items():
        _, kinds, names, values, units, scopes, keys = zip(*mine)
        out.append((run_id, (kinds, names, units, scopes, keys), values))
    return out


def pack(model_version: str, emulator_version: str | None, named: dict[str, float]) -> tuple[str, bytes]:
    """(layout, figures) of a latest_figures row, see FIGURES_BYTE_ORDER (the layout's
    text: figures_layout's, 0019)."""
    names = sorted(named)
    return (json.dumps([model_version, emulator_version, names]),
            struct.pack(f"{FIGURES_BYTE_ORDER}{len(names)}d", *(named[n] for n in names)))


def _put_figures(connection: Connection, rows: Sequence[tuple]) -> None:
    """(candidate, kind, run, model_version, emulator_version, names, places, values)
    rows into latest_figures (the figures: values[places], names the names of those
    places), each replacing the pair's row unless that is of a newer run (a concurrent
    PostgreSQL writer's). Packed as `pack` packs them, each distinct layout made and
    found in figures_layout once (a sweep's rows share one)."""
    layouts: dict[tuple, tuple[str, Any, struct.Struct]] = {}
    packed = []
    for c, k, run, model_version, emulator_version, names, at, values in rows:
        key = (model_version, emulator_version, id(names))  # names and places: one `_totals_by_kind` entry
        found = layouts.get(key)
        if found is None:
            order = sorted(range(len(names)), key=names.__getitem__)
            places = [at[i] for i in order]  # the values of the names in sorted order, taken by one call
            take = operator.itemgetter(*places) if len(places) > 1 else lambda v, i=places[0]: (v[i],)
            found = layouts[key] = (json.dumps([model_version, emulator_version, [names[i] for i in order]]), take,
                                    struct.Struct(f"{FIGURES_BYTE_ORDER}{len(names)}d"))
        text, take, packer = found
        packed.append((c, k, run, text, packer.pack(*take(values))))
    ids = layout_ids(connection, dict.fromkeys(text for text, _, _ in layouts.values()), "figures_layout")
    packed = [(c, k, run, ids[text], figures) for c, k, run, text, figures in packed]
    # (Rows by the hundred in one statement: on SQLite a third faster than an executemany of them.)
    one = "(" + ", ".join([_mark(connection)] * 5) + ")"
    execute = executor(connection)
    for i in range(0, len(packed), _ROWS_PER_INSERT):
        part = packed[i:i + _ROWS_PER_INSERT]
        execute(_UPSERT.format(values=", ".join([one] * len(part))), tuple(itertools.chain.from_iterable(part)))


_UPSERT = ("INSERT INTO latest_figures (candidate_id, kind, run_id, layout_id, figures) VALUES {values}"
           " ON CONFLICT (candidate_id, kind) DO UPDATE SET run_id = excluded.run_id, layout_id = excluded.layout_id,"
           " figures = excluded.figures WHERE excluded.run_id > latest_figures.run_id")


def rebuild(connection: Connection, candidate_ids: Iterable[int] | None = None) -> None:
    """Recompute latest_figures from the runs' packed metrics: for every
    candidate, or for these. For stores filled by hand (bulk inserts, as the benches do)."""
    if candidate_ids is None:
        connection.exec_driver_sql("DELETE FROM latest_figures")
        record(connection, _totals_of(connection, ""))
        return
    ids = sorted({int(c) for c in candidate_ids})
    for i in range(0, len(ids), _CHUNK):
        listed = ", ".join(map(str, ids[i:i + _CHUNK]))
        connection.exec_driver_sql(f"DELETE FROM latest_figures WHERE candidate_id IN ({listed})")
        record(connection, _totals_of(connection, f"WHERE r.candidate_id IN ({listed})"))


def _totals_of(connection: Connection, where: str) -> list[tuple]:
    """The metrics every run shows (`where` on its alias r) as (run_id, shape, values)
    packs; a linking run (run.reused_run_id, dse.records.reuse) shows the run's it reuses."""
    found = connection.exec_driver_sql(
        "SELECT r.id, p.layout_id, p.figures FROM run r JOIN run_metrics p ON p.run_id = coalesce(r.reused_run_id, r.id) "
        f"{where} ORDER BY r.id").all()
    held = layouts(connection, {row[1] for row in found})
    shapes = {ident: tuple(map(tuple, zip(*entries))) if entries else ((),) * 5 for ident, entries in held.items()}
    out = []
    for run_id, layout_id, figures in found:
        figures = bytes(figures)
        out.append((run_id, shapes[layout_id], struct.unpack(f"{FIGURES_BYTE_ORDER}{len(figures) // 8}d", figures)))
    return out


def _runs(connection: Connection, run_ids: list[int]) -> dict[int, tuple[int, str, str | None]]:
    """run id -> (candidate id, model version, emulator version)."""
    out: dict[int, tuple[int, str, str | None]] = {}
    execute = executor(connection)  # SQLite: the driver's rows (SQLAlchemy's Row a run was most of this read)
    for i in range(0, len(run_ids), _CHUNK):
        part = run_ids[i:i + _CHUNK]
        out.update((run, (c, m, e)) for run, c, m, e in execute(
            "SELECT id, candidate_id, model_version, emulator_version FROM run WHERE id IN "
            f"({', '.join(map(str, map(int, part)))})"))
    return out


def _mark(connection: Connection) -> str:
    return "?" if connection.dialect.paramstyle == "qmark" else "%s"
