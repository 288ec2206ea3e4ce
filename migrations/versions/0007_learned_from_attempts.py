"""what the service learns of a spot pool is read from the last week of its attempts: the
cumulative spot_observations counters go (indexes for that read); a job's quote records its
typical (median-run) cost

Revision ID: 0007_learned_from_attempts
Revises: 0006_active_name_unique
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_learned_from_attempts"
down_revision: str | None = "0006_active_name_unique"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_table("spot_observations")
    op.add_column("jobs", sa.Column("quote_typical_microusd", sa.BigInteger(), nullable=True))
    op.create_index("ix_job_attempts_kind_created", "job_attempts", ["capacity_type", "created_at"])
    op.create_index("ix_job_attempts_kind_ended", "job_attempts", ["capacity_type", "ended_at"])


def downgrade() -> None:
    op.drop_index("ix_job_attempts_kind_ended", table_name="job_attempts")
    op.drop_index("ix_job_attempts_kind_created", table_name="job_attempts")
    op.drop_column("jobs", "quote_typical_microusd")
    # The counters start again from zero: the attempts still hold what they counted.
    op.create_table(
        "spot_observations",
        sa.Column("zone", sa.String(length=40), nullable=False),
        sa.Column("instance_type", sa.String(length=60), nullable=False),
        sa.Column("spot_seconds", sa.Float(), nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("zone", "instance_type"),
    )
