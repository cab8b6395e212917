"""metric: one index on (run_id, name) in place of one on run_id and one on name

Every query reaches metrics through their runs (run_id, then name within a run); the
index on name alone served none of them and made each metric row dearer to write.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from typing import Sequence, Union

from alembic import op

revision: str = "0004"
down_revision: Union[str, None] = "0003"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_index("ix_metric_run_id_name", "metric", ["run_id", "name"], unique=False)
    op.drop_index(op.f("ix_metric_run_id"), table_name="metric")
    op.drop_index(op.f("ix_metric_name"), table_name="metric")


def downgrade() -> None:
    op.create_index(op.f("ix_metric_name"), "metric", ["name"], unique=False)
    op.create_index(op.f("ix_metric_run_id"), "metric", ["run_id"], unique=False)
    op.drop_index("ix_metric_run_id_name", table_name="metric")
