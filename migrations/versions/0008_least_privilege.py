"""Least privilege: the runtime role gets rows, not definitions; PUBLIC loses TEMP and CREATE.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

Run as the owner role (``minruntime migrate`` connects with ``Settings.owner_url``). It grants
the runtime role — the user of ``MINRUNTIME_DATABASE_URL``, passed by ``minruntime migrate``
as the ``runtime_role`` attribute — what the processor and the requeue worker need
(``minruntime.store.privileges.runtime_grants``), including for tables later migrations
create (default privileges). It grants nothing when the owner is the runtime role (a one-role
deployment) or when the role does not exist: roles are made by the stack's superuser
bootstrap, compose's init script or a DBA (docs/storage.md#roles-and-privileges), never here.

For every role (the reader included): no temporary tables in this database, no CREATE in
schema ``public`` (PostgreSQL 15's default already; older databases kept it). The database
owner may revoke these; a migrating role that does not own the database leaves a warning.
"""

from __future__ import annotations

from alembic import op
from revision_parts import runtime_role

from minruntime.store.privileges import runtime_grants, runtime_revokes

revision: str = "0008"
down_revision: str | None = "0007"

_PUBLIC_LIMITS = """
DO $$
BEGIN
    EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database());
    REVOKE CREATE ON SCHEMA public FROM PUBLIC;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'minruntime 0008: % does not own database %: ask its owner to run '
                  'REVOKE TEMPORARY ON DATABASE ... FROM PUBLIC', current_user, current_database();
END
$$
"""
_PUBLIC_LIMITS_UNDONE = """
DO $$
BEGIN
    EXECUTE format('GRANT TEMPORARY ON DATABASE %I TO PUBLIC', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    NULL;
END
$$
"""


def upgrade() -> None:
    runtime = runtime_role()
    if runtime is not None:
        for statement in runtime_grants(runtime):
            op.execute(statement)
    op.execute(_PUBLIC_LIMITS)


def downgrade() -> None:
    op.execute(_PUBLIC_LIMITS_UNDONE)
    runtime = runtime_role()
    if runtime is not None:
        for statement in runtime_revokes(runtime):
            op.execute(statement)
