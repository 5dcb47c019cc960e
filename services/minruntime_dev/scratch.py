"""Throw-away databases for tests and benchmarks, never the service's own database.

The service roles lack CREATEDB, so databases are created as the cluster's superuser over
the local stack's owner-only unix socket (peer authentication), falling back to the runtime
role. A scratch database is owned by the owner role (when it exists), like the service's own:
migrate it with ``scratch_owner_url``, run the service with the URL ``create_scratch_database``
returns (the runtime role).
"""

from __future__ import annotations

import secrets
from dataclasses import replace

import psycopg
from psycopg import sql

from minruntime.pgurl import PgAddress
from minruntime.settings import OWNER_ROLE, Settings
from minruntime_dev.stack.postgres import PostgresNode

SCRATCH_PREFIX = "minruntime_test"


def admin_connection(settings: Settings) -> psycopg.Connection[tuple[object, ...]]:
    """An autocommit connection allowed to create databases: the superuser over the socket of
    the stack's primary (with `--pg-standby`, after a failover, that is the second server)."""
    from minruntime_dev.stack.pg_standby import STANDBY_NAME

    port = settings.database_parts.port
    for node in (PostgresNode(settings), PostgresNode(settings, STANDBY_NAME, port + 1)):
        if not node.socket_dir.exists():
            continue
        try:
            conn = node.admin_connection()
        except psycopg.OperationalError:
            continue
        if conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,):
            return conn
        conn.close()
    # Elsewhere (e.g. docker compose): the service role itself, if it may create databases.
    return psycopg.connect(settings.database_url, autocommit=True)


def create_scratch_database(settings: Settings, prefix: str = SCRATCH_PREFIX) -> str:
    """Create an empty database owned by the service role; return its URL."""
    if not prefix.startswith(SCRATCH_PREFIX):
        raise ValueError(f"scratch database names must start with {SCRATCH_PREFIX}")
    name = f"{prefix}_{secrets.token_hex(4)}"
    with admin_connection(settings) as conn:
        split = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (OWNER_ROLE,)).fetchone()
        owner = OWNER_ROLE if split else settings.database_parts.user
        create = sql.SQL("CREATE DATABASE {} OWNER {}")
        conn.execute(create.format(sql.Identifier(name), sql.Identifier(owner)))
    return _on_database(settings.database_url, name)


def scratch_owner_url(settings: Settings, url: str) -> str:
    """The owner role's URL of the scratch database at ``url`` (what migrates it)."""
    return _on_database(settings.owner_url, _database_of(url))


def _on_database(url: str, name: str) -> str:
    return replace(PgAddress.parse(url), dbname=name).uri()


def _database_of(url: str) -> str:
    return PgAddress.parse(url).dbname or ""


def drop_scratch_database(settings: Settings, url: str) -> None:
    """Drop a database made by create_scratch_database, closing its sessions."""
    name = _database_of(url)
    if not name.startswith(SCRATCH_PREFIX):
        raise ValueError(f"refusing to drop {name!r}: not a scratch database")
    with admin_connection(settings) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        conn.execute(drop.format(sql.Identifier(name)))
