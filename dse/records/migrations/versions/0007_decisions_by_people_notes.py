"""decisions by people, the sweep's proposals, notes after the fact

- decision.kind: "decision" (a person's; it alone sets the hypothesis' status) or
  "proposal" (the verdict a sweep reads in the evidence, waiting for a person).
- decision.evidence_kinds, decision.override, decision.checks: the metric kinds a
  verdict rests on, the reason given for overriding a failed acceptance test, and the
  acceptance clauses as evaluated when the decision was made.
- note: limitations, open questions and free notes added to an experiment after the
  fact, each with its author and time.
- data: the sweep's automatic decisions become proposals, and an experiment whose
  status a sweep set by itself (confirmed / refuted, no person's decision) goes back
  to "testing" unless a person's latest decision says the same: until now the sweep
  decided alone, which people now do.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: Union[str, None] = "0006"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

# The sweep's author name as of this revision (frozen here).
SWEEP_AUTHOR = "dse sweep (automatic)"


def upgrade() -> None:
    # Plain columns: SQLite adds them in place.
    with op.batch_alter_table("decision") as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=16), nullable=False, server_default="decision"))
        batch_op.add_column(sa.Column("evidence_kinds", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("override", sa.Text(), nullable=True))
        batch_op.add_column(sa.Column("checks", sa.JSON(), nullable=True))
    op.create_table(
        "note",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("experiment_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("author", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["experiment_id"], ["experiment.id"], name=op.f("fk_note_experiment_id_experiment")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_note")),
    )
    op.create_index(op.f("ix_note_experiment_id"), "note", ["experiment_id"], unique=False)

    bind = op.get_bind()
    bind.execute(sa.text("UPDATE decision SET kind = 'proposal' WHERE author = :a"), {"a": SWEEP_AUTHOR})
    # A status a sweep set stands only where a person's latest decision says the same.
    decided = dict(bind.execute(sa.text(
        "SELECT d.experiment_id, d.verdict FROM decision d WHERE d.kind = 'decision' AND d.id = "
        "(SELECT MAX(e.id) FROM decision e WHERE e.experiment_id = d.experiment_id AND e.kind = 'decision')"
    )).all())
    for experiment_id, status in bind.execute(sa.text(
            "SELECT id, status FROM experiment WHERE status IN ('confirmed', 'refuted')")).all():
        verdict = decided.get(experiment_id)
        backed = "confirmed" if verdict in ("accepted", "confirmed") else "refuted" if verdict == "refuted" else "testing"
        if backed != status:
            bind.execute(sa.text("UPDATE experiment SET status = :s WHERE id = :i"), {"s": backed, "i": experiment_id})


def downgrade() -> None:
    op.drop_index(op.f("ix_note_experiment_id"), table_name="note")
    op.drop_table("note")
    with op.batch_alter_table("decision") as batch_op:
        batch_op.drop_column("checks")
        batch_op.drop_column("override")
        batch_op.drop_column("evidence_kinds")
        batch_op.drop_column("kind")
