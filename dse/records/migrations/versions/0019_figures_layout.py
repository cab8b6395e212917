"""latest_figures' layout stored once by id (issue 35)

A sweep's latest_figures rows all carry one layout, the JSON list [model_version,
emulator_version, [names, sorted]] of their runs: written in every row it was 0.7 MB of
a grid sweep's 2,320 rows, two thirds of each row, and a third of the time SQLite took to
store that table.

- upgrade: figures_layout (id, hash unique, layout): each distinct layout text once,
  found again by its sha256; latest_figures.layout_id names it (no foreign key: SQLite
  adds and drops the column in place, as 0018 did candidate.config_id);
  latest_figures.layout goes, its texts moved.
- downgrade: layout back (text, nullable: SQLite adds no NOT NULL column in place), filled
  from figures_layout; layout_id and figures_layout go.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06
"""

import hashlib
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: Union[str, None] = "0018"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "figures_layout",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("layout", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_figures_layout")),
        sa.UniqueConstraint("hash", name=op.f("uq_figures_layout_hash")),
    )
    op.add_column("latest_figures", sa.Column("layout_id", sa.Integer(), nullable=True))
    connection = op.get_bind()
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    texts = list(connection.exec_driver_sql("SELECT DISTINCT layout FROM latest_figures").scalars())
    if texts:
        connection.exec_driver_sql(f"INSERT INTO figures_layout (hash, layout) VALUES ({mark}, {mark})",
                                   [(hashlib.sha256(t.encode()).hexdigest(), t) for t in texts])
        op.execute("UPDATE latest_figures SET layout_id = "
                   "(SELECT f.id FROM figures_layout f WHERE f.layout = latest_figures.layout)")
    op.execute("ALTER TABLE latest_figures DROP COLUMN layout")


def downgrade() -> None:
    op.add_column("latest_figures", sa.Column("layout", sa.Text(), nullable=True))
    op.execute("UPDATE latest_figures SET "
               "layout = (SELECT f.layout FROM figures_layout f WHERE f.id = latest_figures.layout_id)")
    op.execute("ALTER TABLE latest_figures DROP COLUMN layout_id")
    op.drop_table("figures_layout")
