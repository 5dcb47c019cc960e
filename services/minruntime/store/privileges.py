"""What each database role may do (docs/storage.md#roles-and-privileges), as SQL.

Three roles: the *owner* owns the schemas and runs the migrations; the *runtime* role (the
user of ``MINRUNTIME_DATABASE_URL``: the processor and the requeue worker) reads and writes
rows of the state tables and reads the surface, and can change no definition; the *reader*
SELECTs the contract's views and EXECUTEs its functions. None of them may create roles.

Used by migration 0008 (as the owner) and by the local stack when it upgrades a database made
by older code, where the runtime role owned everything (``stack up``, as the superuser).
"""

from __future__ import annotations

from typing import Final

from sqlalchemy import Connection, text

from minruntime.store.tables import READ_SCHEMA, STATE_SCHEMA

VERSION_TABLE: Final = f"{STATE_SCHEMA}.alembic_version"
# Projection snapshots (migration 0009): the runtime role takes them (SELECT, INSERT) and can
# change or delete none; a snapshot is evidence that ``replay --verify`` checks.
SNAPSHOT_TABLES: Final = (
    f"{STATE_SCHEMA}.projection_snapshots",
    f"{STATE_SCHEMA}.projection_snapshot_tables",
    f"{STATE_SCHEMA}.projection_snapshot_podgroups",
)
# Every function that takes an advisory lock (unlocking only ever releases one's own).
ADVISORY_LOCK_FUNCTIONS: Final = (
    "SELECT p.oid::regprocedure::text FROM pg_proc p"
    " WHERE p.pronamespace = 'pg_catalog'::regnamespace"
    " AND p.proname ~ '^pg_(try_)?advisory_(xact_)?lock(_shared)?$' ORDER BY 1"
)
# The requeue worker's leader lock, as a reader would call it.
_PUBLIC_CAN_LOCK: Final = text(
    "SELECT has_function_privilege('public', 'pg_catalog.pg_try_advisory_lock(bigint)', 'EXECUTE')"
)


def quote(name: str) -> str:
    """A SQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


def runtime_grants(runtime: str) -> list[str]:
    """Rows, not definitions: what the processor and the worker need, now and for new tables.

    Run by the owner. Its default privileges make tables a later migration creates writable
    by ``runtime`` too, and everything it creates (shadow schemas of ``replay --into`` too)
    readable by ``runtime``; functions it creates are not executable by PUBLIC.
    """
    role = quote(runtime)
    return [
        f"GRANT USAGE ON SCHEMA {STATE_SCHEMA}, {READ_SCHEMA} TO {role}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {STATE_SCHEMA} TO {role}",
        f"REVOKE INSERT, UPDATE, DELETE ON {VERSION_TABLE} FROM {role}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {STATE_SCHEMA} TO {role}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA {READ_SCHEMA} TO {role}",
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {STATE_SCHEMA}, {READ_SCHEMA} TO {role}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {STATE_SCHEMA}"
        f" GRANT INSERT, UPDATE, DELETE ON TABLES TO {role}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {STATE_SCHEMA}"
        f" GRANT USAGE, SELECT ON SEQUENCES TO {role}",
        f"ALTER DEFAULT PRIVILEGES GRANT USAGE ON SCHEMAS TO {role}",
        f"ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO {role}",
        f"ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO {role}",
        "ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC",
        # Granted above with every table; only when migration 0009 made them.
        f"DO $$ BEGIN IF to_regclass('{SNAPSHOT_TABLES[0]}') IS NOT NULL THEN"
        f" {snapshot_limits(runtime)[0]}; END IF; END $$",
    ]


def snapshot_limits(runtime: str) -> list[str]:
    """The runtime role may add snapshots and read them, never change or remove one."""
    return [
        f"REVOKE UPDATE, DELETE, TRUNCATE ON {', '.join(SNAPSHOT_TABLES)} FROM {quote(runtime)}"
    ]


def runtime_revokes(runtime: str) -> list[str]:
    """The inverse of ``runtime_grants``."""
    role = quote(runtime)
    return [
        "ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO PUBLIC",
        f"ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM {role}",
        f"ALTER DEFAULT PRIVILEGES REVOKE SELECT ON TABLES FROM {role}",
        f"ALTER DEFAULT PRIVILEGES REVOKE USAGE ON SCHEMAS FROM {role}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {STATE_SCHEMA}"
        f" REVOKE USAGE, SELECT ON SEQUENCES FROM {role}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA {STATE_SCHEMA}"
        f" REVOKE INSERT, UPDATE, DELETE ON TABLES FROM {role}",
        f"REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA {STATE_SCHEMA}, {READ_SCHEMA} FROM {role}",
        f"REVOKE SELECT ON ALL TABLES IN SCHEMA {READ_SCHEMA} FROM {role}",
        f"REVOKE USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {STATE_SCHEMA} FROM {role}",
        f"REVOKE SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {STATE_SCHEMA} FROM {role}",
        f"REVOKE USAGE ON SCHEMA {STATE_SCHEMA}, {READ_SCHEMA} FROM {role}",
    ]


def restrict_advisory_locks(functions: list[str], roles: list[str]) -> list[str]:
    """Only ``roles`` may take advisory locks (a superuser runs this: pg_catalog's functions).

    The requeue worker's leadership is a session advisory lock: a role that can take the same
    key first stops every requeue decision. EXECUTE is granted to PUBLIC by default.
    """
    if not functions:
        return []
    names = ", ".join(functions)
    grants = [f"GRANT EXECUTE ON FUNCTION {names} TO {quote(role)}" for role in roles]
    return [f"REVOKE EXECUTE ON FUNCTION {names} FROM PUBLIC", *grants]


def public_can_take_advisory_locks(conn: Connection) -> bool:
    """True when any role (a reader too) may take the worker's leader lock."""
    return bool(conn.execute(_PUBLIC_CAN_LOCK).scalar_one())
