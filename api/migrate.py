"""Apply Alembic migrations programmatically (`python -m api.admin migrate`, `make run`, the tests).

The migrations ship inside the installed distribution as the `migrations` package, so this works
from a wheel in an image as well as from a checkout; no alembic.ini is needed (alembic.ini at the
repo root stays for developers running the `alembic` command by hand).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine


def migrations_dir() -> Path:
    """The installed `migrations` package's directory (env.py and versions/)."""
    location = Path(str(resources.files("migrations")))
    if not (location / "env.py").is_file():
        raise RuntimeError(f"the migrations package at {location} has no env.py")
    return location


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("path_separator", "os")
    config.attributes["configure_logger"] = False
    if url:
        config.attributes["url"] = url
    return config


def current_revision(engine: Engine) -> str | None:
    """The database's migration revision; None for a database not migrated yet."""
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade_to_head(engine: Engine) -> None:
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def downgrade_to_base(engine: Engine) -> None:
    config = alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, "base")
