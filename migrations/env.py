"""Alembic environment: the URL comes from the settings unless the caller passed one."""

from __future__ import annotations

from logging.config import fileConfig

import sqlalchemy as sa
from alembic import context

from minruntime.settings import Settings
from minruntime.store.engine import engine_from
from minruntime.store.tables import STATE_SCHEMA, metadata

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


# Both modes: the models, the version table in the state schema, every schema compared.
_OPTIONS = {
    "target_metadata": metadata,
    "version_table_schema": STATE_SCHEMA,
    "include_schemas": True,
}


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings().sqlalchemy_url


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of running it (`alembic upgrade --sql`)."""
    context.configure(url=_url(), literal_binds=True, **_OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations in one transaction per revision on a live connection."""
    engine = engine_from(_url(), poolclass=sa.pool.NullPool)
    with engine.connect() as connection:
        # The version table lives in the state schema, which must exist before alembic
        # looks for it; the schema itself is never dropped by a downgrade.
        connection.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {STATE_SCHEMA}"))
        connection.commit()
        context.configure(connection=connection, transaction_per_migration=True, **_OPTIONS)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
