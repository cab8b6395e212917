"""latest_metric: each candidate's latest total figures of each kind, kept beside the metrics

- latest_metric (candidate_id, kind, name) -> run_id, value: the total metrics of each
  kind from the candidate's latest run that recorded that kind (the largest value where a
  run repeats a name, as metric_table took it), backfilled here from the metric rows and
  kept from now on by every write of metrics in the same transaction. A sorted page or a
  wide table of 100,000 candidates reads these rows instead of every metric through its run.
- run: its index on candidate_id becomes one on (candidate_id, stage), so a candidate's
  latest run of a stage is found in the index alone (still one index: no dearer inserts).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: Union[str, None] = "0010"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# Frozen here (not imported from dse.records.latest): a migration keeps doing what it did.
BACKFILL = """
INSERT INTO latest_metric (candidate_id, kind, name, run_id, value)
SELECT r.candidate_id, m.kind, m.name, m.run_id, max(m.value)
FROM metric m
JOIN run r ON r.id = m.run_id
JOIN (SELECT r2.candidate_id AS candidate_id, m2.kind AS kind, max(m2.run_id) AS run_id
      FROM metric m2 JOIN run r2 ON r2.id = m2.run_id
      WHERE m2.scope = 'total'
      GROUP BY r2.candidate_id, m2.kind) newest
  ON newest.candidate_id = r.candidate_id AND newest.kind = m.kind AND newest.run_id = m.run_id
WHERE m.scope = 'total'
GROUP BY r.candidate_id, m.kind, m.name, m.run_id
"""


def upgrade() -> None:
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
    op.execute(BACKFILL)
    op.create_index("ix_run_candidate_id_stage", "run", ["candidate_id", "stage"], unique=False)
    op.drop_index("ix_run_candidate_id", table_name="run")


def downgrade() -> None:
    op.create_index("ix_run_candidate_id", "run", ["candidate_id"], unique=False)
    op.drop_index("ix_run_candidate_id_stage", table_name="run")
    op.drop_table("latest_metric")
