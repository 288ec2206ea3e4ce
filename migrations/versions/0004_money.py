"""the quote at submit on each job, and whether it holds the team's budget

Revision ID: 0004_money
Revises: 0004_tokens
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_money"
down_revision: str | None = "0004_tokens"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("quote_cost_microusd", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("quote_hold_microusd", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("quote_finish_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("quote_p_meet", sa.Float(), nullable=True))
        batch.add_column(
            sa.Column("holds_budget", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in (
            "holds_budget",
            "quote_p_meet",
            "quote_finish_at",
            "quote_hold_microusd",
            "quote_cost_microusd",
        ):
            batch.drop_column(column)
