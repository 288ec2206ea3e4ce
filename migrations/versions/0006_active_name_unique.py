"""a job name is unique among a team's unfinished jobs, by a partial unique index

Revision ID: 0006_active_name_unique
Revises: 0005_money
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_active_name_unique"
down_revision: str | None = "0005_money"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE = "status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"


def upgrade() -> None:
    # Before names were unique, a team could have several unfinished jobs of one name: the
    # oldest keeps it, the others get their id's first 8 characters appended, so the index can
    # be built and every job stays addressable.
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(f"SELECT id, team_id, name FROM jobs WHERE {ACTIVE} ORDER BY created_at, id")
    ).all()
    seen: set[tuple[str, str]] = set()
    for job_id, team_id, name in rows:
        if (team_id, name) in seen:
            bind.execute(
                sa.text("UPDATE jobs SET name = :name WHERE id = :id"),
                {"name": f"{name[:54]}-{job_id[:8]}", "id": job_id},
            )
        seen.add((team_id, name))
    op.create_index(
        "uq_jobs_team_active_name",
        "jobs",
        ["team_id", "name"],
        unique=True,
        postgresql_where=sa.text(ACTIVE),
        sqlite_where=sa.text(ACTIVE),
    )


def downgrade() -> None:
    op.drop_index("uq_jobs_team_active_name", table_name="jobs")
