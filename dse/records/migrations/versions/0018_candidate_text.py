"""A candidate's config and mapping stored once per distinct text (issue 35)

A grid sweep's 2,320 candidates carry ~150 distinct configs (~1.7 kB of JSON each) and 16
mappings: written in every candidate row they were 4 of its 4.3 MB, and a quarter of the
time SQLite alone takes to store its records.

- upgrade: candidate_text (id, hash unique, text): each distinct canonical JSON text once,
  found again by its sha256; candidate.config_id and candidate.mapping_id name them (no
  foreign key: SQLite adds and drops the columns in place, without copying the table
  every other table references); candidate.config and candidate.mapping go, their texts
  moved.
- downgrade: config and mapping back (JSON, nullable: SQLite adds no NOT NULL column in
  place), filled from the texts; the ids and candidate_text go.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06
"""

import hashlib
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: Union[str, None] = "0017"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "candidate_text",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_candidate_text")),
        sa.UniqueConstraint("hash", name=op.f("uq_candidate_text_hash")),
    )
    op.add_column("candidate", sa.Column("config_id", sa.Integer(), nullable=True))
    op.add_column("candidate", sa.Column("mapping_id", sa.Integer(), nullable=True))
    connection = op.get_bind()
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    rows = connection.exec_driver_sql(
        "SELECT id, CAST(config AS TEXT), CAST(mapping AS TEXT) FROM candidate").all()
    texts = list(dict.fromkeys(t for _, config, mapping in rows for t in (config, mapping)))
    if texts:
        connection.exec_driver_sql(f"INSERT INTO candidate_text (hash, text) VALUES ({mark}, {mark})",
                                   [(hashlib.sha256(t.encode()).hexdigest(), t) for t in texts])
        ids = {t: i for i, t in connection.exec_driver_sql("SELECT id, text FROM candidate_text")}
        connection.exec_driver_sql(f"UPDATE candidate SET config_id = {mark}, mapping_id = {mark} WHERE id = {mark}",
                                   [(ids[config], ids[mapping], cid) for cid, config, mapping in rows])
    op.execute("ALTER TABLE candidate DROP COLUMN config")
    op.execute("ALTER TABLE candidate DROP COLUMN mapping")


def downgrade() -> None:
    op.add_column("candidate", sa.Column("config", sa.JSON(), nullable=True))
    op.add_column("candidate", sa.Column("mapping", sa.JSON(), nullable=True))
    # SQLite's JSON is text as it is (a CAST to JSON there would be a number); PostgreSQL's a type
    as_json = "{}" if op.get_bind().dialect.name == "sqlite" else "CAST({} AS JSON)"
    op.execute(f"UPDATE candidate SET "
               f"config = (SELECT {as_json.format('t.text')} FROM candidate_text t WHERE t.id = candidate.config_id), "
               f"mapping = (SELECT {as_json.format('t.text')} FROM candidate_text t WHERE t.id = candidate.mapping_id)")
    op.execute("ALTER TABLE candidate DROP COLUMN config_id")
    op.execute("ALTER TABLE candidate DROP COLUMN mapping_id")
    op.drop_table("candidate_text")
