"""candidate_run kept by the writes of runs, not by triggers (issue 35)

0011's triggers on run upserted three candidate_run rows per inserted run and updated
them per finished run, one row at a time: about a third of a sweep's store writes. The
store's writers now keep candidate_run themselves, one set-based statement a batch, in
the same transaction (dse.records.candidate_runs); the rows are the same.

- upgrade: drop the triggers (SQLite: two; PostgreSQL: the trigger and its function).
  candidate_run is up to date (the triggers kept it), so nothing is refilled.
- downgrade: candidate_run refilled from the runs (as 0011 backfilled it) and the
  triggers made again as 0011 made them.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from typing import Sequence, Union

from alembic import op

revision: str = "0017"
down_revision: Union[str, None] = "0016"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# Frozen here (copies of 0011's): a migration keeps doing what it did.
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
    if op.get_bind().dialect.name == "sqlite":
        op.execute("DROP TRIGGER candidate_run_after_insert")
        op.execute("DROP TRIGGER candidate_run_after_update")
    else:
        op.execute("DROP TRIGGER candidate_run_kept ON run")
        op.execute("DROP FUNCTION candidate_run_kept()")


def downgrade() -> None:
    # The triggers keep what they find: start them from rows made from the runs.
    op.execute("DELETE FROM candidate_run")
    op.execute(BACKFILL_CANDIDATE_RUN)
    for statement in SQLITE_TRIGGERS if op.get_bind().dialect.name == "sqlite" else POSTGRESQL_TRIGGERS:
        op.execute(statement)
