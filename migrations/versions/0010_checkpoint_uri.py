"""a job records its checkpoints' prefix at its first launch (gpujobs.checkpoints), so its later
attempts and the artifacts API look where its trainer wrote, not under whatever checkpoint root
the deployment has been given since

Revision ID: 0010_checkpoint_uri
Revises: 0009_throughput_key
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_checkpoint_uri"
down_revision: str | None = "0009_throughput_key"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Jobs launched before it have none: they are looked for under the current root (where
    # they were written, unless it has changed), and their next launch records that prefix.
    op.add_column("jobs", sa.Column("checkpoint_uri", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "checkpoint_uri")
