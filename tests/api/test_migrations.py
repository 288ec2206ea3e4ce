from __future__ import annotations

from sqlalchemy import Engine, create_engine, inspect, text

from api.migrate import downgrade_to_base, upgrade_to_head
from api.models import Base
from api.settings import Settings
from tests.conftest import PG_ADMIN_URL, _pg_url


def _roundtrip(engine: Engine) -> None:
    upgrade_to_head(engine)
    tables = set(inspect(engine).get_table_names())
    assert {t.name for t in Base.metadata.sorted_tables} <= tables
    assert "alembic_version" in tables
    downgrade_to_base(engine)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    upgrade_to_head(engine)
    assert {t.name for t in Base.metadata.sorted_tables} <= set(inspect(engine).get_table_names())


def test_upgrade_and_downgrade_on_sqlite(tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(home=tmp_path)
    engine = create_engine(settings.sqlalchemy_url())
    _roundtrip(engine)


def test_upgrade_and_downgrade_on_postgres() -> None:
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = "gpujobs_migration_test"
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(_pg_url(name))
    try:
        _roundtrip(engine)
    finally:
        engine.dispose()
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def test_models_match_the_migrations(engine: Engine) -> None:
    """Autogenerate finds nothing to add: the migrations describe the models exactly."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert diff == []
