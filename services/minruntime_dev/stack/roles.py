"""The local stack's superuser bootstrap: roles, passwords, the database, advisory locks.

Roles are made here, by the cluster's superuser, never by the service's own roles (none of
them has CREATEROLE). The three roles of docs/storage.md#roles-and-privileges:

- ``minruntime_owner`` owns the database and its schemas and runs the migrations;
- the runtime role (the user of ``MINRUNTIME_DATABASE_URL``, ``minruntime`` by default);
- ``minruntime_reader``;
- with a standby (``stack up --pg-standby``) ``minruntime_replication``: REPLICATION and LOGIN,
  for the standby's replication connection, and no database (minruntime_dev.stack.access).

Passwords: the one ``MINRUNTIME_DATABASE_URL`` carries, if any (an explicit choice is kept,
as before); otherwise generated once and kept in ``<stack dir>/pgpass`` (mode 0600), which is
also the libpq passfile the default URLs name.

A stack made by older code is upgraded: the runtime role loses CREATEROLE, what it owned
(databases, schemas, tables) passes to the owner, which grants it back rows-only access; the
superuser loses its fixed password; PUBLIC loses the advisory-lock functions.
"""

from __future__ import annotations

from typing import Any, LiteralString

from psycopg import Connection, sql

from minruntime.errors import StackError
from minruntime.settings import OWNER_ROLE, READER_ROLE, Settings
from minruntime.store.privileges import (
    ADVISORY_LOCK_FUNCTIONS,
    restrict_advisory_locks,
    runtime_grants,
)
from minruntime.store.tables import READ_SCHEMA, STATE_SCHEMA
from minruntime_dev.stack.access import REPLICATION_ROLE
from minruntime_dev.stack.credentials import ensure_passwords
from minruntime_dev.stack.postgres import SUPERUSER, PostgresNode

ROLE_COMMENT = "managed by `minruntime stack up`"
_ROLE_OPTIONS = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
_REPLICATION_OPTIONS = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE REPLICATION NOBYPASSRLS"


def bootstrap_roles(
    node: PostgresNode, settings: Settings, *, replication: bool = False
) -> dict[str, str]:
    """Create or upgrade roles, passwords and the database; lock advisory locks down.
    Returns each role's password."""
    db = settings.database_parts
    runtime = db.user
    if runtime in (SUPERUSER, OWNER_ROLE, READER_ROLE):
        raise StackError(
            f"MINRUNTIME_DATABASE_URL names role {runtime!r}: the service's runtime role must "
            "be a role of its own (e.g. minruntime)"
        )
    given = {runtime: db.password} if db.password else {}
    roles = [OWNER_ROLE, runtime, READER_ROLE, *([REPLICATION_ROLE] if replication else [])]
    passwords = ensure_passwords(settings.passfile, roles, given)
    with node.admin_connection() as conn:
        for role, password in passwords.items():
            options = _REPLICATION_OPTIONS if role == REPLICATION_ROLE else _ROLE_OPTIONS
            _ensure_role(conn, role, password, options)
        # The superuser logs in over the owner-only socket only (older stacks: 'postgres').
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD NULL").format(sql.Identifier(SUPERUSER)))
        owned = _databases_owned_by(conn, runtime)
        if not _exists(conn, "SELECT 1 FROM pg_database WHERE datname = %s", db.dbname):
            conn.execute(
                sql.SQL("CREATE DATABASE {} OWNER {}").format(
                    sql.Identifier(db.dbname), sql.Identifier(OWNER_ROLE)
                )
            )
    for dbname in owned:
        with node.admin_connection(dbname) as conn:
            _hand_over(conn, runtime)
    with node.admin_connection() as conn:
        service_databases = _databases_owned_by(conn, OWNER_ROLE)
    for dbname in ["template1", *service_databases]:
        with node.admin_connection(dbname) as conn:
            _restrict_advisory_locks(conn, [runtime, OWNER_ROLE])
    return passwords


def _exists(conn: Connection[Any], query: LiteralString, *args: object) -> bool:
    return conn.execute(query, args).fetchone() is not None


def _ensure_role(conn: Connection[Any], role: str, password: str, options: LiteralString) -> None:
    verb = "ALTER" if _exists(conn, "SELECT 1 FROM pg_roles WHERE rolname = %s", role) else "CREATE"
    conn.execute(
        sql.SQL("{} ROLE {} " + options + " PASSWORD {}").format(
            sql.SQL(verb), sql.Identifier(role), sql.Literal(password)
        )
    )
    # Replaces migration 0002's marker: its downgrade must not drop a role the stack manages.
    conn.execute(
        sql.SQL("COMMENT ON ROLE {} IS {}").format(sql.Identifier(role), sql.Literal(ROLE_COMMENT))
    )


def _databases_owned_by(conn: Connection[Any], role: str) -> list[str]:
    rows = conn.execute(
        "SELECT datname FROM pg_database WHERE datdba = (SELECT oid FROM pg_roles"
        " WHERE rolname = %s) AND datallowconn AND NOT datistemplate ORDER BY datname",
        (role,),
    ).fetchall()
    return [str(row[0]) for row in rows]


def _hand_over(conn: Connection[Any], runtime: str) -> None:
    """A database made by older code: the owner takes everything, the runtime keeps rows."""
    conn.execute(
        sql.SQL("REASSIGN OWNED BY {} TO {}").format(
            sql.Identifier(runtime), sql.Identifier(OWNER_ROLE)
        )
    )
    schemas = conn.execute(
        "SELECT count(*) FROM pg_namespace WHERE nspname = ANY(%s)", ([STATE_SCHEMA, READ_SCHEMA],)
    ).fetchone()
    if schemas is None or schemas[0] < 2:
        return  # not migrated yet: migration 0008 grants when it runs
    # As the owner, so its default privileges cover tables later migrations create.
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(OWNER_ROLE)))
    try:
        for statement in runtime_grants(runtime):
            conn.execute(statement.encode())
    finally:
        conn.execute("RESET ROLE")


def _restrict_advisory_locks(conn: Connection[Any], roles: list[str]) -> None:
    # Idempotent; template1 too, so every database created later (scratch ones) starts so.
    functions = [str(row[0]) for row in conn.execute(ADVISORY_LOCK_FUNCTIONS)]
    for statement in restrict_advisory_locks(functions, roles):
        conn.execute(statement.encode())
