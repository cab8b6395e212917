"""run.reused_run_id: evidence reused from an earlier experiment, linked, not copied

- run.reused_run_id: the earlier run (same candidate hash, same workload identity, same
  model and emulator versions and result-affecting stage settings, in another experiment)
  whose evidence this run stands on instead of evaluating the candidate again. Its status
  and reason are that run's; its metrics and raw evidence stay the earlier run's rows and
  are read through the link (dse.records.reuse). NULL: the run evaluated the candidate.
  No foreign key, so SQLite adds the column in place (a foreign key would rebuild the run
  table and drop the candidate_run triggers of 0011).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: Union[str, None] = "0013"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column("run", sa.Column("reused_run_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    # In place on both (SQLite >= 3.35): a batch rebuild of run would drop 0011's triggers.
    op.execute("ALTER TABLE run DROP COLUMN reused_run_id")
