"""latest_metric: each candidate's latest total figures of each kind, kept beside the metrics

- latest_metric (candidate_id, kind, name) -> run_id, value: the total metrics of each
  kind from the candidate's latest run that recorded that kind (the largest value where a
  run repeats a name, as metric_table took it), backfilled here from the metric rows and
  kept from now on by every write of metrics in the same transaction. A sorted page or a
  wide table of 100,000 candidates reads these rows instead of every metric through its run.
- candidate_run (candidate_id, role) -> experiment_id, run_id, stage, status, reason: the
  runs a candidate's reads show, by role: "latest" (its latest run of any stage), each
  stage's name (its latest run of that stage) and "outcome" (its latest run, unless that
  was "pruned": then its latest other run, if any), with the run's stage, status and
  reason; indexed by (experiment_id, role, status), so an experiment's candidates by
  outcome are counted from the index alone, and a table of 100,000 candidates reads these
  narrow rows instead of probing the runs for each. Kept by triggers on run (after an
  insert, after an update of status or reason): every writer of a run (finishing,
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


# How the triggers keep candidate_run (frozen here, as above). A new run is its candidate's
# latest and its stage's latest (ids only grow; the guard keeps the larger where two
# PostgreSQL writers commit out of order), and its outcome unless it is "pruned" while a
# run that is not stands. An update of a run's status or reason is copied to the rows that
# name the run; the outcome is recomputed from the candidate's runs only when the update
# makes a run "pruned" or undoes that.
_COLUMNS = "candidate_run (candidate_id, role, experiment_id, run_id, stage, status, reason)"
BACKFILL_CANDIDATE_RUN = f"""
INSERT INTO {_COLUMNS}
SELECT c.id, roles.role, c.experiment_id, r.id, r.stage, r.status, r.reason
FROM candidate c
JOIN (SELECT candidate_id, 'latest' AS role, max(id) AS run_id FROM run GROUP BY candidate_id
      UNION ALL
      SELECT candidate_id, 'outcome', coalesce(max(CASE WHEN status != 'pruned' THEN id END), max(id))
      FROM run GROUP BY candidate_id
      UNION ALL
      SELECT candidate_id, stage, max(id) FROM run GROUP BY candidate_id, stage
     ) roles ON roles.candidate_id = c.id
JOIN run r ON r.id = roles.run_id
"""
_SET = "run_id = excluded.run_id, stage = excluded.stage, status = excluded.status, reason = excluded.reason"
_AS_NEW = "SELECT NEW.candidate_id, {role}, c.experiment_id, NEW.id, NEW.stage, NEW.status, NEW.reason " \
          "FROM candidate c WHERE c.id = NEW.candidate_id"
ON_INSERT = [
    f"""INSERT INTO {_COLUMNS} {_AS_NEW.format(role="'latest'")}
    ON CONFLICT (candidate_id, role) DO UPDATE SET {_SET} WHERE excluded.run_id > candidate_run.run_id""",
    f"""INSERT INTO {_COLUMNS} {_AS_NEW.format(role="NEW.stage")}
    ON CONFLICT (candidate_id, role) DO UPDATE SET {_SET} WHERE excluded.run_id > candidate_run.run_id""",
    f"""INSERT INTO {_COLUMNS} {_AS_NEW.format(role="'outcome'")}
    ON CONFLICT (candidate_id, role) DO UPDATE SET {_SET} WHERE excluded.run_id > candidate_run.run_id
        AND (excluded.status != 'pruned' OR candidate_run.status = 'pruned')""",
]
ON_UPDATE = [
    """UPDATE candidate_run SET status = NEW.status, reason = NEW.reason
    WHERE candidate_id = NEW.candidate_id AND run_id = NEW.id""",
    f"""INSERT INTO {_COLUMNS}
    SELECT c.id, 'outcome', c.experiment_id, r.id, r.stage, r.status, r.reason FROM candidate c JOIN run r ON r.id = coalesce(
        (SELECT max(o.id) FROM run o WHERE o.candidate_id = NEW.candidate_id AND o.status != 'pruned'),
        (SELECT max(o.id) FROM run o WHERE o.candidate_id = NEW.candidate_id))
    WHERE c.id = NEW.candidate_id AND (NEW.status = 'pruned') != (OLD.status = 'pruned')
    ON CONFLICT (candidate_id, role) DO UPDATE SET {_SET}""",
]
SQLITE_TRIGGERS = [f"""
CREATE TRIGGER candidate_run_after_{event} AFTER {clause} ON run BEGIN
    {"; ".join(statements)};
END""" for event, clause, statements in (("insert", "INSERT", ON_INSERT),
                                          ("update", "UPDATE OF status, reason", ON_UPDATE))]
POSTGRESQL_TRIGGERS = [f"""
CREATE FUNCTION candidate_run_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        {"; ".join(ON_INSERT)};
    ELSE
        {"; ".join(ON_UPDATE)};
    END IF;
    RETURN NULL;
END $$""", """
CREATE TRIGGER candidate_run_kept AFTER INSERT OR UPDATE OF status, reason ON run
FOR EACH ROW EXECUTE FUNCTION candidate_run_kept()"""]


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
        "candidate_run",
        sa.Column("candidate_id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["candidate_id"], ["candidate.id"],
                                name=op.f("fk_candidate_run_candidate_id_candidate")),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_candidate_run_run_id_run")),
        sa.PrimaryKeyConstraint("candidate_id", "role", name=op.f("pk_candidate_run")),
        sqlite_with_rowid=False,
    )
    op.execute(BACKFILL_CANDIDATE_RUN)
    op.create_index("ix_candidate_run_experiment_id_role_status", "candidate_run", ["experiment_id", "role", "status"])
    sqlite = op.get_bind().dialect.name == "sqlite"
    for statement in SQLITE_TRIGGERS if sqlite else POSTGRESQL_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER candidate_run_after_insert")
        op.execute("DROP TRIGGER candidate_run_after_update")
    else:
        op.execute("DROP TRIGGER candidate_run_kept ON run")
        op.execute("DROP FUNCTION candidate_run_kept()")
    op.drop_table("candidate_run")
    op.create_index("ix_run_candidate_id", "run", ["candidate_id"], unique=False)
    op.drop_index("ix_run_candidate_id_stage", table_name="run")
    op.drop_table("latest_metric")
