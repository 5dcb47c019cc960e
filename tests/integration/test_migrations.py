"""Migrations: every revision upgrades and downgrades (stairway); the tables match the models."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from minruntime.settings import Settings
from minruntime.store import engine_from, metadata
from minruntime.store.migrate import (
    alembic_config,
    current_revision,
    downgrade,
    head_revision,
    is_at_head,
    upgrade,
)
from minruntime.store.tables import STATE_SCHEMA


def revisions() -> list[str]:
    script = ScriptDirectory.from_config(alembic_config(Settings()))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def surface(url: str) -> set[tuple[str, str]]:
    engine = engine_from(url)
    try:
        with engine.connect() as conn:
            return {
                (r.schema, r.name)
                for r in conn.execute(
                    sa.text(
                        "SELECT n.nspname AS schema, c.relname AS name FROM pg_class c"
                        " JOIN pg_namespace n ON n.oid = c.relnamespace"
                        " WHERE n.nspname IN ('minruntime', 'minruntime_state')"
                        " UNION SELECT n.nspname, p.proname FROM pg_proc p"
                        " JOIN pg_namespace n ON n.oid = p.pronamespace"
                        " WHERE n.nspname IN ('minruntime', 'minruntime_state')"
                    )
                )
            }
    finally:
        engine.dispose()


def test_stairway(scratch: str) -> None:
    # Migrations run as the owner role, like `minruntime migrate`.
    assert current_revision(scratch) is None
    upgrade(scratch)
    at_head = surface(scratch)
    downgrade(scratch, "base")
    assert current_revision(scratch) is None
    assert {name for _, name in surface(scratch)} <= {"alembic_version", "alembic_version_pkc"}
    upgrade(scratch)
    assert surface(scratch) == at_head
    # And one revision at a time, down and up again.
    steps = revisions()
    for revision in reversed(steps[:-1]):
        downgrade(scratch, revision)
        assert current_revision(scratch) == revision
    downgrade(scratch, "base")
    for revision in steps:
        upgrade(scratch, revision)
        assert current_revision(scratch) == revision
        downgrade(scratch, "-1")
        upgrade(scratch, revision)
    assert surface(scratch) == at_head


def test_the_session_database_is_at_head(engine: sa.Engine, database_url: str) -> None:
    assert is_at_head(engine)
    assert current_revision(database_url) == head_revision() == revisions()[-1]


def test_the_tables_match_the_models(engine: sa.Engine) -> None:
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "include_schemas": True,
                "version_table_schema": STATE_SCHEMA,
                "include_name": lambda name, kind, _: kind != "schema" or name == STATE_SCHEMA,
                "compare_server_default": False,
            },
        )
        diff = compare_metadata(context, metadata)
    assert diff == []
