"""make-before-break: an attempt may be a standby, held beside the job's running attempt until
the handover promotes it; `ready_at` is when its trainer first said it was built and waiting

Revision ID: 0011_standby_attempts
Revises: 0010_checkpoint_uri
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_standby_attempts"
down_revision: str | None = "0010_checkpoint_uri"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "job_attempts",
        sa.Column("standby", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.add_column("job_attempts", sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("job_attempts", "ready_at")
    op.drop_column("job_attempts", "standby")
