"""The database engine, built from the one settings object (never at import time)."""

from __future__ import annotations

import sqlalchemy as sa

from minruntime.settings import Settings


def sqlalchemy_url(settings_or_url: Settings | str) -> str:
    """Return a SQLAlchemy URL naming the psycopg 3 driver, from settings or any PG URL."""
    if isinstance(settings_or_url, Settings):
        return settings_or_url.sqlalchemy_url
    scheme, sep, rest = settings_or_url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        return f"postgresql+psycopg://{rest}"
    return settings_or_url


def engine_from(settings_or_url: Settings | str, **options: object) -> sa.Engine:
    """Create an engine for the service's database; connects lazily, on first use."""
    options.setdefault("pool_pre_ping", True)
    return sa.create_engine(sqlalchemy_url(settings_or_url), **options)
