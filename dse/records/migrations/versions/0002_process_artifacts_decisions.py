"""process identity of runs, artifact owner and name, candidate decisions, read indexes

- run.pid, run.pid_start: the process that runs it, so a run left "running" by a process
  that died is marked crashed on the next open.
- artifact.experiment_id, artifact.name: experiment-level artifacts (graph dumps,
  reports) and the original name of an imported file.
- decision.candidate_id: the candidate that `dse decide` accepts or rejects.
- indexes for the reads that must stay fast on a store of 100,000 runs.
- JSON columns rewritten as canonical text (sorted keys, no spaces), as the store now
  writes them, so reads hand the stored text out without parsing every row.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

import json
from typing import Any, Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: Union[str, None] = "0001"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # Plain columns without constraints: SQLite adds them in place (no table copy, so
    # the tables that reference `run` are not disturbed).
    with op.batch_alter_table("run") as batch_op:
        batch_op.add_column(sa.Column("pid", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("pid_start", sa.String(length=64), nullable=True))
    op.create_index(op.f("ix_run_status"), "run", ["status"], unique=False)
    op.create_index(
        op.f("ix_candidate_experiment_id"), "candidate", ["experiment_id"], unique=False
    )

    # New foreign keys: batch mode copies and moves these tables on SQLite (nothing
    # references them), and is a plain ALTER TABLE on PostgreSQL.
    with op.batch_alter_table("artifact") as batch_op:
        batch_op.add_column(sa.Column("experiment_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("name", sa.Text(), nullable=True))
        batch_op.create_foreign_key(
            op.f("fk_artifact_experiment_id_experiment"), "experiment", ["experiment_id"], ["id"]
        )
    op.create_index(op.f("ix_artifact_run_id"), "artifact", ["run_id"], unique=False)
    op.create_index(op.f("ix_artifact_sha256"), "artifact", ["sha256"], unique=False)
    op.create_index(op.f("ix_artifact_experiment_id"), "artifact", ["experiment_id"], unique=False)

    with op.batch_alter_table("decision") as batch_op:
        batch_op.add_column(sa.Column("candidate_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            op.f("fk_decision_candidate_id_candidate"), "candidate", ["candidate_id"], ["id"]
        )
    op.create_index(op.f("ix_decision_experiment_id"), "decision", ["experiment_id"], unique=False)
    op.create_index(op.f("ix_decision_candidate_id"), "decision", ["candidate_id"], unique=False)

    _canonical_json_text()


# The JSON columns, and the canonical form as of this revision (frozen here: a later
# change to dse's own canonical_json must not change what this migration did).
JSON_COLUMNS = {
    "experiment": ("acceptance",),
    "candidate": ("config", "mapping", "diff"),
    "run": ("versions",),
    "decision": ("evidence",),
}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _canonical_json_text() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    for table_name, names in JSON_COLUMNS.items():
        table = sa.table(table_name, sa.column("id", sa.Integer), *(sa.column(n) for n in names))
        rows = bind.execute(
            sa.select(table.c.id, *(sa.cast(table.c[n], sa.Text) for n in names))
        ).all()
        updates = []
        for row in rows:
            stored = dict(zip(names, row[1:]))
            rewritten = {n: _canonical(json.loads(v)) for n, v in stored.items() if v is not None}
            if any(rewritten[n] != stored[n] for n in rewritten):
                updates.append({"row_id": row[0], **{f"v_{n}": rewritten.get(n) for n in names}})
        if not updates:
            continue
        # PostgreSQL's json column takes text only through an explicit cast; SQLite
        # stores the text as it is.
        values = ", ".join(
            f"{n} = CAST(:v_{n} AS JSON)" if postgres else f"{n} = :v_{n}" for n in names
        )
        bind.execute(sa.text(f"UPDATE {table_name} SET {values} WHERE id = :row_id"), updates)


def downgrade() -> None:
    op.drop_index(op.f("ix_decision_candidate_id"), table_name="decision")
    op.drop_index(op.f("ix_decision_experiment_id"), table_name="decision")
    with op.batch_alter_table("decision") as batch_op:
        batch_op.drop_constraint(op.f("fk_decision_candidate_id_candidate"), type_="foreignkey")
        batch_op.drop_column("candidate_id")

    op.drop_index(op.f("ix_artifact_experiment_id"), table_name="artifact")
    op.drop_index(op.f("ix_artifact_sha256"), table_name="artifact")
    op.drop_index(op.f("ix_artifact_run_id"), table_name="artifact")
    with op.batch_alter_table("artifact") as batch_op:
        batch_op.drop_constraint(op.f("fk_artifact_experiment_id_experiment"), type_="foreignkey")
        batch_op.drop_column("name")
        batch_op.drop_column("experiment_id")

    op.drop_index(op.f("ix_candidate_experiment_id"), table_name="candidate")
    op.drop_index(op.f("ix_run_status"), table_name="run")
    with op.batch_alter_table("run") as batch_op:
        batch_op.drop_column("pid_start")
        batch_op.drop_column("pid")
