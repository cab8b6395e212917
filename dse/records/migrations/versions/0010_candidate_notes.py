"""candidates' notes

- candidate.notes: what the sweep noticed about a candidate that is not a metric, e.g. bank
  rows its chip has but the ISA's row-address field cannot reach (reported as
  unaddressable_sram_bytes, not as private SRAM).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: Union[str, None] = "0009"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # A plain nullable column: SQLite adds it in place.
    with op.batch_alter_table("candidate") as batch_op:
        batch_op.add_column(sa.Column("notes", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("candidate") as batch_op:
        batch_op.drop_column("notes")
