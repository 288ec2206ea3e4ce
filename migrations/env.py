from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from api.models import Base
from api.settings import Settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    given = config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url")
    if given:
        return given
    settings = Settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    return settings.sqlalchemy_url()


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        _run(connection)


def _run(connection: Connection) -> None:
    # Batch mode lets ALTERs work on SQLite (which rebuilds tables) and is a no-op on PostgreSQL.
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
