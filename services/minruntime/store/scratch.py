"""Throw-away databases for tests and benchmarks, never the service's own database.

The service role may lack CREATEDB, so databases are created as the cluster's superuser over
the local stack's unix socket (trust authentication), falling back to the service role.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from minruntime.settings import Settings
from minruntime.stack.postgres import SUPERUSER, PostgresNode

SCRATCH_PREFIX = "minruntime_test"


def admin_connection(settings: Settings) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection allowed to create databases."""
    node = PostgresNode(settings)
    if node.socket_dir.exists():
        try:
            return psycopg.connect(
                host=str(node.socket_dir),
                port=settings.database_parts.port,
                user=SUPERUSER,
                dbname="postgres",
                autocommit=True,
            )
        except psycopg.OperationalError:
            pass
    # Elsewhere (e.g. docker compose): the service role itself, if it may create databases.
    return psycopg.connect(settings.database_url, autocommit=True)


def create_scratch_database(settings: Settings, prefix: str = SCRATCH_PREFIX) -> str:
    """Create an empty database owned by the service role; return its URL."""
    if not prefix.startswith(SCRATCH_PREFIX):
        raise ValueError(f"scratch database names must start with {SCRATCH_PREFIX}")
    name = f"{prefix}_{secrets.token_hex(4)}"
    with admin_connection(settings) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(name), sql.Identifier(settings.database_parts.user)
            )
        )
    parts = urlsplit(settings.database_url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def drop_scratch_database(settings: Settings, url: str) -> None:
    """Drop a database made by create_scratch_database, closing its sessions."""
    name = urlsplit(url).path.lstrip("/")
    if not name.startswith(SCRATCH_PREFIX):
        raise ValueError(f"refusing to drop {name!r}: not a scratch database")
    with admin_connection(settings) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
