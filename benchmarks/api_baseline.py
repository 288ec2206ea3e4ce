"""The ceiling of this stack: FastAPI + SQLAlchemy + psycopg doing one INSERT and one SELECT.

Same server (uvicorn), same driver and pool settings as the real API, and sync endpoints like
ours, so the ratio measures what gpujobs adds (auth, validation, events, idempotency), not the
stack.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException
from sqlalchemy import JSON, String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


class Base(DeclarativeBase):
    pass


class Row(Base):
    __tablename__ = "baseline_jobs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    body: Mapped[dict[str, Any]] = mapped_column(JSON)


engine = create_engine(os.environ["BASELINE_DATABASE_URL"], pool_size=10, max_overflow=20)
Base.metadata.create_all(engine)
app = FastAPI()


@app.post("/v1/jobs", status_code=201)
def create(body: dict[str, Any]) -> dict[str, Any]:
    job_id = str(uuid.uuid4())
    with Session(engine) as session:
        session.add(Row(id=job_id, body=body))
        session.commit()
    return {"id": job_id, **body}


@app.get("/v1/jobs/{job_id}")
def get(job_id: str) -> dict[str, Any]:
    with Session(engine) as session:
        row = session.scalars(select(Row).where(Row.id == job_id)).first()
        if row is None:
            raise HTTPException(404)
        return {"id": row.id, **row.body}
