"""Engine and sessions. The database is the source of truth and the queue."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from api.settings import Settings


def make_engine(settings: Settings) -> Engine:
    url = settings.sqlalchemy_url()
    if url.startswith("sqlite"):
        settings.home.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        event.listen(engine, "begin", _sqlite_begin_immediate)
        return engine
    return create_engine(
        url,
        pool_size=settings.database_pool_size,
        max_overflow=settings.database_max_overflow,
        pool_pre_ping=True,
    )


def _sqlite_pragmas(dbapi_connection: sqlite3.Connection, _record: object) -> None:
    # SQLite has no SELECT ... FOR UPDATE, and pysqlite only says BEGIN at the first write, so a
    # read-then-write could act on a row another transaction changed meanwhile (a cancel undone
    # by the reconciler). Take the transaction into our hands: see _sqlite_begin_immediate.
    dbapi_connection.isolation_level = None
    # WAL lets the API read while the scheduler writes; foreign keys are off by default in SQLite.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_begin_immediate(connection: Connection) -> None:
    """Every transaction takes SQLite's write lock when it starts: transactions that read and then
    write run one at a time, which is what row locks give us on PostgreSQL."""
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commits on success, rolls back on any error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
