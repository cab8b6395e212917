"""run's status index takes the stage and candidate; experiment.judged_run_id

- run: its index on status becomes one on (status, stage, candidate_id), so the candidates
  with an ok emulator run (`dse history`'s "emulated") are found in the index alone,
  without a probe of the run table per run. Still one index on status (a lookup by status
  alone reads its prefix): no dearer inserts than before.
- experiment.judged_run_id: the newest run of the experiment's candidates when its sweep
  last judged the evidence against the acceptance criteria (propose), whether or not that
  wrote a new proposal; the latest proposal stands for every run up to it. A rerun after a
  resumed sweep whose proposal did not change knows so without judging again (NULL: not
  judged since 0013; the proposal's time then says).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: Union[str, None] = "0012"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_index("ix_run_status_stage_candidate_id", "run", ["status", "stage", "candidate_id"], unique=False)
    op.drop_index(op.f("ix_run_status"), table_name="run")
    op.add_column("experiment", sa.Column("judged_run_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("experiment", "judged_run_id")
    op.create_index(op.f("ix_run_status"), "run", ["status"], unique=False)
    op.drop_index("ix_run_status_stage_candidate_id", table_name="run")
