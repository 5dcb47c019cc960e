"""The database engine, built from the one settings object (never at import time)."""

from __future__ import annotations

import sqlalchemy as sa

from minruntime.pgurl import PgAddress
from minruntime.settings import Settings


def sqlalchemy_url(settings_or_url: Settings | str) -> str:
    """Return a SQLAlchemy URL naming the psycopg 3 driver, from settings or any address
    libpq accepts (one host or several, a URI or `key=value`: minruntime.pgurl)."""
    if isinstance(settings_or_url, Settings):
        return settings_or_url.sqlalchemy_url
    if settings_or_url.startswith("postgresql+"):
        return settings_or_url  # already SQLAlchemy's
    return PgAddress.parse(settings_or_url).sqlalchemy()


def reached_server(conn: sa.Connection) -> str:
    """`host:port/database` of the server this connection reached (of several hosts, the one
    libpq chose), for a log line."""
    info = conn.connection.dbapi_connection.info  # type: ignore[union-attr]
    return f"{info.host}:{info.port}/{info.dbname}"


def engine_from(settings_or_url: Settings | str, **options: object) -> sa.Engine:
    """Create an engine for the service's database; connects lazily, on first use."""
    options.setdefault("pool_pre_ping", True)
    return sa.create_engine(sqlalchemy_url(settings_or_url), **options)
