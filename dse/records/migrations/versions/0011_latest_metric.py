"""latest_metric: each candidate's latest total figures of each kind, kept beside the metrics

- latest_metric (candidate_id, kind, name) -> run_id, value: the total metrics of each
  kind from the candidate's latest run that recorded that kind (the largest value where a
  run repeats a name, as metric_table took it), backfilled here from the metric rows and
  kept from now on by every write of metrics in the same transaction. A sorted page or a
  wide table of 100,000 candidates reads these rows instead of every metric through its run.
- candidate_outcome (candidate_id) -> experiment_id, run_id, status: each candidate's
  outcome run (its latest run, unless that was "pruned": then its latest other run, if
  any) and that run's status, indexed by (experiment_id, status), so an experiment's
  candidates by outcome are counted from the index alone. Kept by triggers on run (after
  an insert, after an update of status): every writer of a run's status (finishing,
  liveness marking a run crashed, imports, bulk inserts) keeps it, in its transaction.
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


# The outcome run of the candidate of run NEW, and its status (frozen as above).
_OUTCOME_OF_NEW = """
SELECT c.id, c.experiment_id, r.id, r.status FROM candidate c JOIN run r ON r.id = coalesce(
    (SELECT max(o.id) FROM run o WHERE o.candidate_id = NEW.candidate_id AND o.status != 'pruned'),
    (SELECT max(o.id) FROM run o WHERE o.candidate_id = NEW.candidate_id))
WHERE c.id = NEW.candidate_id"""
_COLUMNS = "candidate_outcome (candidate_id, experiment_id, run_id, status)"
BACKFILL_OUTCOME = f"""
INSERT INTO {_COLUMNS}
SELECT c.id, c.experiment_id, r.id, r.status FROM candidate c JOIN run r ON r.id = coalesce(
    (SELECT max(o.id) FROM run o WHERE o.candidate_id = c.id AND o.status != 'pruned'),
    (SELECT max(o.id) FROM run o WHERE o.candidate_id = c.id))
"""
SQLITE_TRIGGERS = [f"""
CREATE TRIGGER run_outcome_{event} AFTER {clause} ON run BEGIN
    INSERT OR REPLACE INTO {_COLUMNS} {_OUTCOME_OF_NEW};
END""" for event, clause in (("insert", "INSERT"), ("update", "UPDATE OF status"))]
POSTGRESQL_TRIGGERS = [f"""
CREATE FUNCTION run_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {_COLUMNS} {_OUTCOME_OF_NEW}
    ON CONFLICT (candidate_id) DO UPDATE SET run_id = excluded.run_id, status = excluded.status;
    RETURN NULL;
END $$""", """
CREATE TRIGGER run_outcome AFTER INSERT OR UPDATE OF status ON run
FOR EACH ROW EXECUTE FUNCTION run_outcome()"""]


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
    op.create_table(
        "candidate_outcome",
        sa.Column("candidate_id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"],
                                name=op.f("fk_candidate_outcome_candidate_id_candidate")),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_candidate_outcome_run_id_run")),
        sa.PrimaryKeyConstraint("candidate_id", name=op.f("pk_candidate_outcome")),
    )
    op.execute(BACKFILL_OUTCOME)
    op.create_index("ix_candidate_outcome_experiment_id_status", "candidate_outcome", ["experiment_id", "status"])
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in SQLITE_TRIGGERS if sqlite else POSTGRESQL_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER run_outcome_insert")
        op.execute("DROP TRIGGER run_outcome_update")
    else:
        op.execute("DROP TRIGGER run_outcome ON run")
        op.execute("DROP FUNCTION run_outcome()")
    op.drop_table("candidate_outcome")
    op.create_index("ix_run_candidate_id", "run", ["candidate_id"], unique=False)
    op.drop_index("ix_run_candidate_id_stage", table_name="run")
    op.drop_table("latest_metric")
