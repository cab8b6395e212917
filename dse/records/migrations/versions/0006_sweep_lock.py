"""sweep_lock: one sweep of an experiment at a time

A row per experiment being swept, naming the process that sweeps it (host, pid and its
start time) with a heartbeat; a second sweep of the experiment refuses to start while that
process lives, and takes the row over once it is dead (see liveness.py).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: Union[str, None] = "0005"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "sweep_lock",
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("pid_start", sa.String(length=64), nullable=True),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"],
                                name=op.f("fk_sweep_lock_experiment_id_experiment")),
        sa.PrimaryKeyConstraint("experiment_id", name=op.f("pk_sweep_lock")),
    )


def downgrade() -> None:
    op.drop_table("sweep_lock")
