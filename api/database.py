"""Engine and sessions. The database is the source of truth and the queue."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from api.settings import Settings


def make_engine(settings: Settings) -> Engine:
    url = settings.sqlalchemy_url()
    if url.startswith("sqlite"):
        settings.make_home()
        if not settings.database_url:
            _private_sqlite_files(settings.home / "gpujobs.db")
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


def _private_sqlite_files(path: Path) -> None:
    """Only the server's user may read the database: SQLite gives its -wal and -shm files the
    database file's mode, so creating that one private covers all three."""
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            file.chmod(0o600)


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
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


def _sqlite_begin_immediate(connection) -> None:  # type: ignore[no-untyped-def]
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
