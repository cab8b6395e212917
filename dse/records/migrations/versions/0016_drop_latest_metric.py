"""latest_metric goes: latest_figures (0012) holds the same figures packed one row per
candidate and kind, and every reader reads them there (issue 35: a sweep wrote one
latest_metric row per candidate and figure, ~80% of its rows, for no reader).

- upgrade: drop latest_metric (its primary key is its only index).
- downgrade: recreate it as 0011 made it and fill it from the runs' packed metrics as
  0011/0015 kept it: per candidate and kind, the total metrics of that kind of its latest
  run that recorded any (a run linking to an earlier run's evidence, 0014, under the
  linking run's id with the earlier run's figures), the largest value where a run repeats
  a name.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

import itertools
import json
import struct
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: Union[str, None] = "0015"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# Frozen here (not imported from dse.records.latest): a migration keeps doing what it did.
_ROWS_PER_INSERT = 100
_RUNS = ("SELECT r.candidate_id, r.id, p.layout_id, p.figures FROM run r "
         "JOIN run_metrics p ON p.run_id = coalesce(r.reused_run_id, r.id) ORDER BY r.id")


def _fill(connection: sa.Connection) -> None:
    layouts = {i: json.loads(t) for i, t in connection.exec_driver_sql("SELECT id, layout FROM metric_layout")}
    # layout id -> [(kind, [(place, name), ...])]: where each kind's totals sit
    totals_of: dict[int, list] = {}
    held: dict[tuple[int, str], tuple[int, dict[str, float]]] = {}  # (candidate, kind) -> (run, figures)
    for candidate_id, run_id, layout_id, figures in connection.exec_driver_sql(_RUNS).all():
        found = totals_of.get(layout_id)
        if found is None:
            by_kind: dict[str, list] = {}
            for place, (kind, name, _, scope, _) in enumerate(layouts[layout_id]):
                if scope == "total":
                    by_kind.setdefault(kind, []).append((place, name))
            found = totals_of[layout_id] = list(by_kind.items())
        if not found:
            continue
        figures = bytes(figures)
        values = struct.unpack(f"<{len(figures) // 8}d", figures)
        for kind, places in found:
            named: dict[str, float] = {}
            for place, name in places:
                named[name] = max(named.get(name, values[place]), values[place])
            held[(candidate_id, kind)] = (run_id, named)  # runs come by id: the latest stands
    rows = [(c, kind, name, run_id, value) for (c, kind), (run_id, named) in sorted(held.items())
            for name, value in sorted(named.items())]
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    one = "(" + ", ".join([mark] * 5) + ")"
    for i in range(0, len(rows), _ROWS_PER_INSERT):
        part = rows[i:i + _ROWS_PER_INSERT]
        connection.exec_driver_sql(
            "INSERT INTO latest_metric (candidate_id, kind, name, run_id, value) VALUES "
            + ", ".join([one] * len(part)), tuple(itertools.chain.from_iterable(part)))


def upgrade() -> None:
    op.drop_table("latest_metric")


def downgrade() -> None:
    op.create_table(
        "latest_metric",
        sa.Column("candidate_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"],
                                name=op.f("fk_latest_metric_candidate_id_candidate")),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_latest_metric_run_id_run")),
        sa.PrimaryKeyConstraint("candidate_id", "kind", "name", name=op.f("pk_latest_metric")),
        sqlite_with_rowid=False,
    )
    _fill(op.get_bind())
