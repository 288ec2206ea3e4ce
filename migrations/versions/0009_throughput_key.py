"""a job records what sets its trainer's rate, and each attempt the rate its trainer last
reported on its GPU model (api.placement.throughput), so a team's next job of the same trainer
converts its hours between GPU models by what the team measured, not by the table

Revision ID: 0009_throughput_key
Revises: 0008_checkpoint_key
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_throughput_key"
down_revision: str | None = "0008_checkpoint_key"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs submitted before it have no key and teach nothing (the key needs the contract's
    # hashing); their attempts' next reports still record the rate.
    op.add_column("jobs", sa.Column("throughput_key", sa.String(length=64), nullable=True))
    op.create_index(
        "ix_jobs_team_throughput_key", "jobs", ["team_id", "throughput_key", "created_at"]
    )
    op.add_column("job_attempts", sa.Column("samples_per_s", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("job_attempts", "samples_per_s")
    op.drop_index("ix_jobs_team_throughput_key", table_name="jobs")
    op.drop_column("jobs", "throughput_key")
