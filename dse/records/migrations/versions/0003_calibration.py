"""calibration: fitted constants of the analytical model per chip, with their evidence

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: Union[str, None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "calibration",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chip", sa.String(), nullable=False),
        sa.Column("chip_hash", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.Column("model_version", sa.String(), nullable=False),
        sa.Column("emulator_version", sa.String(), nullable=True),
        sa.Column("constants", sa.JSON(), nullable=False),
        sa.Column("error_before", sa.JSON(), nullable=False),
        sa.Column("error_after", sa.JSON(), nullable=False),
        sa.Column("points", sa.JSON(), nullable=False),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("git_commit", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibration")),
    )
    op.create_index(op.f("ix_calibration_chip"), "calibration", ["chip"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_calibration_chip"), table_name="calibration")
    op.drop_table("calibration")
