"""make-before-break: an attempt may be a standby, held beside the job's running attempt until
the handover promotes it; `running_at` is when it was first seen running, `ready_at` when its
trainer first said it was built and waiting

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
    op.add_column(
        "job_attempts", sa.Column("running_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("job_attempts", sa.Column("ready_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    # Before this revision every open attempt is the job's: an open standby would become a
    # second one, and its trainer would wait for an endpoint that no longer answers.
    open_standbys = op.get_bind().scalar(
        sa.text("SELECT count(*) FROM job_attempts WHERE standby AND ended_at IS NULL")
    )
    if open_standbys:
        raise RuntimeError(
            f"{open_standbys} standby attempts are open: let them end (or cancel their jobs) "
            "before downgrading below 0011_standby_attempts"
        )
    op.drop_column("job_attempts", "ready_at")
    op.drop_column("job_attempts", "running_at")
    op.drop_column("job_attempts", "standby")
