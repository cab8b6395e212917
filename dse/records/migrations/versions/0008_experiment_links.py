"""experiment_link: an experiment follows or reopens an earlier one, with a reason

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: Union[str, None] = "0007"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "experiment_link",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("other_id", sa.Integer(), nullable=False),
        sa.Column("relation", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"],
                                name=op.f("fk_experiment_link_experiment_id_experiment")),
        sa.ForeignKeyConstraint(["other_id"], ["experiment.id"], name=op.f("fk_experiment_link_other_id_experiment")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_experiment_link")),
    )
    op.create_index(op.f("ix_experiment_link_experiment_id"), "experiment_link", ["experiment_id"], unique=False)
    op.create_index(op.f("ix_experiment_link_other_id"), "experiment_link", ["other_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_experiment_link_other_id"), table_name="experiment_link")
    op.drop_index(op.f("ix_experiment_link_experiment_id"), table_name="experiment_link")
    op.drop_table("experiment_link")
