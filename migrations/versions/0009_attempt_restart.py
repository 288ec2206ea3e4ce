"""an attempt records how long it took from its launch to its first step, so the restart time
the policy prices is raised by what the service measured (api.placement.restarts)

Revision ID: 0009_attempt_restart
Revises: 0008_checkpoint_key
Create Date: 2026-12-03
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_attempt_restart"
down_revision: str | None = "0008_checkpoint_key"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("job_attempts", sa.Column("restart_s", sa.Float(), nullable=True))
    op.create_index("ix_job_attempts_launched", "job_attempts", ["launched_at"])


def downgrade() -> None:
    op.drop_index("ix_job_attempts_launched", table_name="job_attempts")
    op.drop_column("job_attempts", "restart_s")
