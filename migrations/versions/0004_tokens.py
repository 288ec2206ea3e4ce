"""tokens: expiry and last use; admin only through the configured admin token

Revision ID: 0004_tokens
Revises: 0003
Create Date: 2026-12-02

Dropping `teams.is_admin` takes admin rights away from every team, including the embedded
default team that older versions created as an admin: its stolen token no longer reads other
teams' jobs. Admin is the configured admin token (GPUJOBS_ADMIN_TOKEN) only.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_tokens"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    if op.get_bind().dialect.name == "sqlite":
        # Not a batch copy: that drops and recreates `teams`, and with foreign keys on, dropping
        # it cascades to every job and token. SQLite >= 3.35 drops a column in place.
        op.execute("ALTER TABLE teams DROP COLUMN is_admin")
    else:
        op.drop_column("teams", "is_admin")


def downgrade() -> None:
    # Adding a column is done in place on SQLite too (no table copy).
    op.add_column(
        "teams", sa.Column("is_admin", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    with op.batch_alter_table("api_tokens") as batch:
        batch.drop_column("last_used_at")
        batch.drop_column("expires_at")
