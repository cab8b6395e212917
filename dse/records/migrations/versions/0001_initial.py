"""initial: experiment, candidate, run, metric, artifact, decision

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: Union[str, None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "experiment",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("hypothesis", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("acceptance", sa.JSON(), nullable=False),
        sa.Column("workload_recipe", sa.String(), nullable=False),
        sa.Column("workload_hash", sa.String(length=64), nullable=False),
        sa.Column("baseline_candidate_id", sa.Integer(), nullable=True),
        sa.Column("spec_text", sa.Text(), nullable=False),
        sa.Column("spec_hash", sa.String(length=64), nullable=False),
        sa.Column("limitations", sa.Text(), nullable=False),
        sa.Column("open_questions", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_experiment")),
        sa.UniqueConstraint("name", name=op.f("uq_experiment_name")),
    )
    op.create_table(
        "candidate",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("mapping", sa.JSON(), nullable=False),
        sa.Column("origin", sa.String(length=16), nullable=False),
        sa.Column("diff", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["experiment_id"], ["experiment.id"], name=op.f("fk_candidate_experiment_id_experiment")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidate")),
        sa.UniqueConstraint("experiment_id", "hash", name=op.f("uq_candidate_experiment_id_hash")),
    )
    # The experiment -> candidate key closes a cycle, so it is added once both tables
    # exist. A use_alter key inside create_table would be silently dropped on
    # PostgreSQL; batch mode makes the same call work on SQLite (copy-and-move).
    with op.batch_alter_table("experiment") as batch_op:
        batch_op.create_foreign_key(
            op.f("fk_experiment_baseline_candidate_id_candidate"),
            "candidate",
            ["baseline_candidate_id"],
            ["id"],
        )
    op.create_table(
        "run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("candidate_id", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("traceback", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("host", sa.String(), nullable=True),
        sa.Column("git_commit", sa.String(length=40), nullable=True),
        sa.Column("git_dirty", sa.Boolean(), nullable=True),
        sa.Column("versions", sa.JSON(), nullable=False),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("model_version", sa.String(), nullable=False),
        sa.Column("emulator_version", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(
            ["candidate_id"], ["candidate.id"], name=op.f("fk_run_candidate_id_candidate")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run")),
    )
    op.create_index(op.f("ix_run_candidate_id"), "run", ["candidate_id"], unique=False)
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
    op.create_index(op.f("ix_metric_name"), "metric", ["name"], unique=False)
    op.create_table(
        "artifact",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("media_type", sa.String(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"], name=op.f("fk_artifact_run_id_run")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifact")),
    )
    op.create_table(
        "decision",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("verdict", sa.Text(), nullable=False),
        sa.Column("rationale", sa.Text(), nullable=False),
        sa.Column("author", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["experiment_id"], ["experiment.id"], name=op.f("fk_decision_experiment_id_experiment")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decision")),
    )


def downgrade() -> None:
    op.drop_table("decision")
    op.drop_table("artifact")
    op.drop_index(op.f("ix_metric_name"), table_name="metric")
    op.drop_index(op.f("ix_metric_run_id"), table_name="metric")
    op.drop_table("metric")
    op.drop_index(op.f("ix_run_candidate_id"), table_name="run")
    op.drop_table("run")
    with op.batch_alter_table("experiment") as batch_op:
        batch_op.drop_constraint(
            op.f("fk_experiment_baseline_candidate_id_candidate"), type_="foreignkey"
        )
    op.drop_table("candidate")
    op.drop_table("experiment")
