"""latest_figures: latest_metric packed one row per candidate and kind

- latest_figures (candidate_id, kind) -> run_id, layout, figures: the latest_metric rows of
  a candidate and kind in one row: layout the JSON list [model_version, emulator_version,
  [names, sorted]] of the run they are from, figures the values in the names' order as
  little-endian float64 bytes. metric_table's wide rows of 100,000 candidates read one row
  each instead of one key probe per figure (and one per run for the versions). Backfilled
  here from latest_metric, kept from now on by every write of metrics in the same
  transaction (dse.records.latest).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

import itertools
import json
import struct
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: Union[str, None] = "0011"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# Frozen here (not imported from dse.records.latest): a migration keeps doing what it did.
_HELD = ("SELECT lm.candidate_id, lm.kind, lm.run_id, r.model_version, r.emulator_version, lm.name, lm.value "
         "FROM latest_metric lm JOIN run r ON r.id = lm.run_id ORDER BY lm.candidate_id, lm.kind, lm.run_id")
_ROWS_PER_INSERT = 100


def _backfill(connection: sa.Connection) -> None:
    packed: dict[tuple[int, str], tuple] = {}
    for c, k, run, model_version, emulator_version, name, value in connection.exec_driver_sql(_HELD):
        held = packed.get((c, k))
        if held is None or held[2] < run:  # the pair's newest run held (rows come by run)
            held = packed[(c, k)] = (c, k, run, model_version, emulator_version, {})
        held[5][name] = value
    rows = []
    for c, k, run, model_version, emulator_version, named in packed.values():
        names = sorted(named)
        rows.append((c, k, run, json.dumps([model_version, emulator_version, names]),
                     struct.pack(f"<{len(names)}d", *(named[n] for n in names))))
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    one = "(" + ", ".join([mark] * 5) + ")"
    for i in range(0, len(rows), _ROWS_PER_INSERT):
        part = rows[i:i + _ROWS_PER_INSERT]
        connection.exec_driver_sql(
            "INSERT INTO latest_figures (candidate_id, kind, run_id, layout, figures) VALUES "
            + ", ".join([one] * len(part)), tuple(itertools.chain.from_iterable(part)))


def upgrade() -> None:
    op.create_table(
        "latest_figures",
        sa.Column("candidate_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("layout", sa.Text(), nullable=False),
        sa.Column("figures", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"],
                                name=op.f("fk_latest_figures_candidate_id_candidate")),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_latest_figures_run_id_run")),
        sa.PrimaryKeyConstraint("candidate_id", "kind", name=op.f("pk_latest_figures")),
        sqlite_with_rowid=False,
    )
    _backfill(op.get_bind())


def downgrade() -> None:
    op.drop_table("latest_figures")
