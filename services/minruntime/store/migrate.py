"""Alembic migrations through its Python API, for the CLI (`minruntime migrate`) and tests."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import minruntime
from minruntime.settings import Settings
from minruntime.store.engine import engine_from, sqlalchemy_url
from minruntime.store.tables import STATE_SCHEMA

MIGRATIONS_DIR = Path(minruntime.__file__).resolve().parents[2] / "migrations"


def alembic_config(settings_or_url: Settings | str) -> Config:
    """An alembic Config pointing at the repository's migrations and the given database.

    Settings migrate as the owner role (``Settings.owner_url``); the migrations grant the
    runtime role (the user of ``MINRUNTIME_DATABASE_URL``) what it needs.
    """
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # The revisions import the parts they share (migrations/revision_parts.py) by name.
    config.set_main_option("prepend_sys_path", str(MIGRATIONS_DIR))
    config.set_main_option("path_separator", "os")
    if isinstance(settings_or_url, Settings):
        url = settings_or_url.owner_sqlalchemy_url
        config.attributes["runtime_role"] = settings_or_url.database_parts.user
    else:
        url = sqlalchemy_url(settings_or_url)
    # ConfigParser interpolation: a literal % in a password must be doubled.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(settings_or_url: Settings | str, revision: str = "head") -> None:
    """Upgrade the database schema to ``revision`` (default: the newest)."""
    command.upgrade(alembic_config(settings_or_url), revision)


def downgrade(settings_or_url: Settings | str, revision: str = "base") -> None:
    """Downgrade the database schema to ``revision`` (default: nothing left)."""
    command.downgrade(alembic_config(settings_or_url), revision)


def current_revision(settings_or_url: Settings | str) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    engine = engine_from(settings_or_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"version_table_schema": STATE_SCHEMA})
            return context.get_current_revision()
    finally:
        engine.dispose()


def head_revision() -> str | None:
    """The newest revision in the repository's migrations."""
    return ScriptDirectory.from_config(alembic_config("postgresql://unused")).get_current_head()


def is_at_head(bind: sa.Engine | sa.Connection) -> bool:
    """True when the database behind ``bind`` is migrated to the newest revision."""
    if isinstance(bind, sa.Engine):
        with bind.connect() as conn:
            return is_at_head(conn)
    context = MigrationContext.configure(bind, opts={"version_table_schema": STATE_SCHEMA})
    return context.get_current_revision() == head_revision()
