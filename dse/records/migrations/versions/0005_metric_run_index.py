"""metric: its one index on run_id alone, not on (run_id, name)

Every query reaches metrics through their runs and filters a run's tens of metrics by
kind or scope; none looks a metric up by name. The name in the index served no query
and made each metric row about 40% dearer to index (a sweep writes thousands a second).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from typing import Sequence, Union

from alembic import op

revision: str = "0005"
down_revision: Union[str, None] = "0004"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_index(op.f("ix_metric_run_id"), "metric", ["run_id"], unique=False)
    op.drop_index("ix_metric_run_id_name", table_name="metric")


def downgrade() -> None:
    op.create_index("ix_metric_run_id_name", "metric", ["run_id", "name"], unique=False)
    op.drop_index(op.f("ix_metric_run_id"), table_name="metric")
