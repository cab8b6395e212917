"""run_metrics, metric_layout: a run's metrics packed into one row, in place of metric

- metric_layout (id, hash unique, layout): what a packed run's values are, the JSON list
  of [kind, name, unit, scope, scope_key] entries in recorded order, stored once per
  distinct layout (found again by the sha256 of its text).
- run_metrics (run_id primary key -> layout_id, figures): a run's metrics, the values in
  its layout's order as little-endian float64 bytes (exact). A sweep's candidate is one
  row instead of ~50 metric rows (issue 35: the rows a candidate cost bounded the sweep).
- metric goes: converted here run by run (its rows in id order, which is the recorded
  order), and rebuilt from the packs on downgrade. latest_metric and latest_figures (0011,
  0012) are unchanged: their figures are the same.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

import hashlib
import itertools
import json
import struct
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: Union[str, None] = "0014"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# Frozen here (not imported from dse.records.packed): a migration keeps doing what it did.
_RUNS_PER_PASS = 5000
_ROWS_PER_INSERT = 100


def _mark(connection: sa.Connection) -> str:
    return "?" if connection.dialect.paramstyle == "qmark" else "%s"


def _insert(connection: sa.Connection, head: str, width: int, rows: list[tuple]) -> None:
    one = "(" + ", ".join([_mark(connection)] * width) + ")"
    for i in range(0, len(rows), _ROWS_PER_INSERT):
        part = rows[i:i + _ROWS_PER_INSERT]
        connection.exec_driver_sql(head + ", ".join([one] * len(part)), tuple(itertools.chain.from_iterable(part)))


def _run_ranges(connection: sa.Connection, table: str):
    low, high = connection.exec_driver_sql(f"SELECT min(run_id), max(run_id) FROM {table}").one()
    if low is None:
        return
    for start in range(low, high + 1, _RUNS_PER_PASS):
        yield start, start + _RUNS_PER_PASS


def _pack(connection: sa.Connection) -> None:
    ids: dict[str, int] = {}  # layout text -> id
    for start, end in list(_run_ranges(connection, "metric")):
        by_run: dict[int, list] = {}
        for row in connection.exec_driver_sql(
                "SELECT run_id, kind, name, value, unit, scope, scope_key FROM metric "
                f"WHERE run_id >= {start} AND run_id < {end} ORDER BY run_id, id"):
            by_run.setdefault(row[0], []).append(row)
        packs = []
        for run_id, mine in by_run.items():
            text = json.dumps([[k, n, u, s, key] for _, k, n, _, u, s, key in mine])
            if text not in ids:
                digest = hashlib.sha256(text.encode()).hexdigest()
                _insert(connection, "INSERT INTO metric_layout (hash, layout) VALUES ", 2, [(digest, text)])
                ids[text] = connection.exec_driver_sql(
                    f"SELECT id FROM metric_layout WHERE hash = {_mark(connection)}", (digest,)).scalar_one()
            packs.append((run_id, ids[text], struct.pack(f"<{len(mine)}d", *(float(r[3]) for r in mine))))
        _insert(connection, "INSERT INTO run_metrics (run_id, layout_id, figures) VALUES ", 3, packs)


def _unpack(connection: sa.Connection) -> None:
    layouts = {i: json.loads(t) for i, t in connection.exec_driver_sql("SELECT id, layout FROM metric_layout")}
    for start, end in list(_run_ranges(connection, "run_metrics")):
        rows = []
        for run_id, layout_id, figures in connection.exec_driver_sql(
                f"SELECT run_id, layout_id, figures FROM run_metrics WHERE run_id >= {start} AND run_id < {end} "
                "ORDER BY run_id").all():
            figures = bytes(figures)
            values = struct.unpack(f"<{len(figures) // 8}d", figures)
            rows += [(run_id, k, n, v, u, s, key) for (k, n, u, s, key), v in zip(layouts[layout_id], values)]
        _insert(connection, "INSERT INTO metric (run_id, kind, name, value, unit, scope, scope_key) VALUES ", 7, rows)


def _metric_table() -> None:
    op.create_table(
        "metric",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("unit", sa.String(), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("scope_key", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_metric_run_id_run")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric")),
    )
    op.create_index(op.f("ix_metric_run_id"), "metric", ["run_id"], unique=False)


def upgrade() -> None:
    op.create_table(
        "metric_layout",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("layout", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_metric_layout")),
        sa.UniqueConstraint("hash", name=op.f("uq_metric_layout_hash")),
    )
    op.create_table(
        "run_metrics",
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("layout_id", sa.Integer(), nullable=False),
        sa.Column("figures", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["layout_id"], ["metric_layout.id"], name=op.f("fk_run_metrics_layout_id_metric_layout")),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_run_metrics_run_id_run")),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_metrics")),
    )
    _pack(op.get_bind())
    op.drop_index(op.f("ix_metric_run_id"), table_name="metric")
    op.drop_table("metric")


def downgrade() -> None:
    _metric_table()
    _unpack(op.get_bind())
    op.drop_table("run_metrics")
    op.drop_table("metric_layout")
