"""a job records what decides its checkpoint's size and the stall of the last checkpoint its
trainer measured (api.placement.checkpoints), so a team's next job of the same trainer is
priced with the checkpoint cost the earlier one measured

Revision ID: 0008_checkpoint_key
Revises: 0007_learned_from_attempts
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_checkpoint_key"
down_revision: str | None = "0007_learned_from_attempts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs submitted before it have no key and teach nothing: their keys would need the
    # contract's hashing inside a migration. A running job's next checkpoint fills its stall.
    op.add_column("jobs", sa.Column("checkpoint_key", sa.String(length=64), nullable=True))
    op.add_column("jobs", sa.Column("checkpoint_stall_s", sa.Float(), nullable=True))
    op.create_index(
        "ix_jobs_team_checkpoint_key", "jobs", ["team_id", "checkpoint_key", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_team_checkpoint_key", table_name="jobs")
    op.drop_column("jobs", "checkpoint_stall_s")
    op.drop_column("jobs", "checkpoint_key")
