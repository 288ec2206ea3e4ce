"""a job token belongs to the attempt it was issued for, and is revoked when that attempt ends:
a released or preempted attempt's leftover process can no longer report into its job

Revision ID: 0012_attempt_tokens
Revises: 0011_standby_attempts
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_attempt_tokens"
down_revision: str | None = "0011_standby_attempts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # No foreign key: the token already goes with its job (job_id cascades), and SQLite cannot
    # add one to an existing table. Tokens issued before this revision have none: they stay
    # valid until their job ends, as they were.
    with op.batch_alter_table("api_tokens") as batch_op:
        batch_op.add_column(sa.Column("attempt_id", sa.String(length=36), nullable=True))
        batch_op.create_index(batch_op.f("ix_api_tokens_attempt_id"), ["attempt_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch_op:
        batch_op.drop_index(batch_op.f("ix_api_tokens_attempt_id"))
        batch_op.drop_column("attempt_id")
