"""Engine and sessions. The database is the source of truth and the queue."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from api.settings import Settings

# An execution option that marks a connection as read-only: on SQLite it begins a deferred
# transaction (a WAL snapshot, no lock) instead of taking the database-wide write lock.
READ_ONLY = "gpujobs_read_only"
_readers: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()


def make_engine(settings: Settings) -> Engine:
    url = settings.sqlalchemy_url()
    pool: dict[str, Any] = {
        "pool_size": settings.database_pool_size,
        "max_overflow": settings.database_max_overflow,
        # A checkout that waits this long means overload: it becomes a 503, not a hung client.
        "pool_timeout": settings.database_pool_timeout_s,
    }
    if url.startswith("sqlite"):
        settings.make_home()
        if not settings.database_url:
            _private_sqlite_files(settings.home / "gpujobs.db")
        engine = create_engine(
            url,
            poolclass=QueuePool,
            connect_args={"check_same_thread": False, "timeout": settings.database_busy_timeout_s},
            **pool,
        )
        writer = _Writer(timeout_s=settings.database_busy_timeout_s)
        event.listen(engine, "connect", _sqlite_pragmas_for(settings.database_busy_timeout_s))
        event.listen(engine, "begin", writer.begin)
        event.listen(engine, "commit", writer.end)
        event.listen(engine, "rollback", writer.end)
        return engine
    engine = create_engine(url, **pool)
    event.listen(engine, "checkin", _note_checkin)
    event.listen(engine, "checkout", _ping_if_idle(engine))
    return engine


# A connection used within this long is trusted as it is: pinging on every checkout (the pool's
# pre_ping) is a round trip per request. One that died meanwhile (the database restarted) fails
# its request with a retryable 503, and SQLAlchemy then renews the whole pool.
PING_AFTER_IDLE_S = 1.0
_CHECKED_IN_AT = "gpujobs_checked_in_at"


def _note_checkin(dbapi_connection: Any, record: Any) -> None:
    record.info[_CHECKED_IN_AT] = time.monotonic()


def _ping_if_idle(engine: Engine) -> Callable[[Any, Any, Any], None]:
    def ping(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        idle_since = record.info.get(_CHECKED_IN_AT)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
            return  # new, or just used
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise sa_exc.DisconnectionError(str(error)) from error  # the pool reconnects

    return ping


def _private_sqlite_files(path: Path) -> None:
    """Only the server's user may read the database: SQLite gives its -wal and -shm files the
    database file's mode, so creating that one private covers all three."""
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    for file in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            file.chmod(0o600)


def _sqlite_pragmas_for(busy_timeout_s: float) -> Callable[[sqlite3.Connection, object], None]:
    def pragmas(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        # SQLite has no SELECT ... FOR UPDATE, and pysqlite only says BEGIN at the first write,
        # so a read-then-write could act on a row another transaction changed meanwhile (a
        # cancel undone by the reconciler). Take the transaction into our hands: _sqlite_begin.
        dbapi_connection.isolation_level = None
        # WAL lets readers work while a writer writes; foreign keys are off by default.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cursor.close()

    return pragmas


class _Writer:
    """SQLite's one writer. A transaction that may write takes the write lock when it starts, so
    transactions that read and then write run one at a time (what row locks give us on
    PostgreSQL). A read-only one (`read_session`) begins deferred: it reads a snapshot and blocks
    nobody. Within this process writers first queue on a lock: SQLite's own busy wait polls, and
    under a burst a poller can starve past any timeout while others keep winning."""

    def __init__(self, *, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.lock = threading.Lock()

    def begin(self, connection: Connection) -> None:
        if connection.get_execution_options().get(READ_ONLY):
            connection.exec_driver_sql("BEGIN")
            return
        if not self.lock.acquire(timeout=self.timeout_s):
            raise sa_exc.OperationalError(
                "BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked")
            )
        connection.info[_HOLDS_WRITER] = True
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            self.end(connection)
            raise

    def end(self, connection: Connection) -> None:
        if connection.info.pop(_HOLDS_WRITER, False):
            self.lock.release()


_HOLDS_WRITER = "gpujobs_holds_writer"


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def read_session(factory: sessionmaker[Session]) -> Session:
    """A session for reads only; it must not write. On SQLite it takes no lock. On PostgreSQL
    it runs in autocommit: no BEGIN and no ROLLBACK round trip, and closing it does no IO. Each
    statement sees its own snapshot, as under READ COMMITTED inside a transaction anyway."""
    engine = factory.kw["bind"]
    reader = _readers.get(engine)
    if reader is None:
        options: dict[str, Any] = {READ_ONLY: True}
        if engine.dialect.name != "sqlite":
            options["isolation_level"] = "AUTOCOMMIT"
        reader = _readers[engine] = engine.execution_options(**options)
    return factory(bind=reader)


def close_does_io(session: Session) -> bool:
    """Whether closing the session may block (a rollback to send): then close it in a thread."""
    if not session.in_transaction():
        return False
    bind = session.get_bind()
    return bind.get_execution_options().get("isolation_level") != "AUTOCOMMIT"


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
