"""capacity outages for every capacity type

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "capacity_outages",
        sa.Column("zone", sa.String(length=40), nullable=False),
        sa.Column("instance_type", sa.String(length=60), nullable=False),
        sa.Column("capacity_type", sa.String(length=16), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("zone", "instance_type", "capacity_type"),
    )
    with op.batch_alter_table("spot_observations") as batch:
        batch.drop_column("no_capacity_until")


def downgrade() -> None:
    with op.batch_alter_table("spot_observations") as batch:
        batch.add_column(sa.Column("no_capacity_until", sa.DateTime(timezone=True), nullable=True))
    op.drop_table("capacity_outages")
