"""the workload identity's parts, hand-picked candidates' reasons

- experiment.workload: what workload_hash identifies (recipe source hash, full params,
  frontend steps, torch version); empty for experiments recorded before, whose
  workload_hash is their model.py's hash alone.
- candidate.why: why a hand-picked candidate is in its experiment (the spec's `why`).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: Union[str, None] = "0008"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # Plain nullable columns: SQLite adds them in place.
    with op.batch_alter_table("experiment") as batch_op:
        batch_op.add_column(sa.Column("workload", sa.JSON(), nullable=True))
    with op.batch_alter_table("candidate") as batch_op:
        batch_op.add_column(sa.Column("why", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("candidate") as batch_op:
        batch_op.drop_column("why")
    with op.batch_alter_table("experiment") as batch_op:
        batch_op.drop_column("workload")
