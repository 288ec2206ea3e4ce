"""Alembic migrations, installed with the package so that `api.migrate` finds them anywhere."""
