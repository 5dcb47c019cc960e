"""Room in ``pod_state``'s pages for its updates in place (issue 30).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29

A submission's pods are COPYed into ``pod_state``, pages filled to 100 %; each pod's row is
then updated on allocation and on release (node, allocated). With no room left in its page an
updated row moved to another page and the primary key gained an entry for it (index pages
dirtied, WAL, dead index entries for vacuum): about half of the updates on the ingest
benchmark's trace. A fillfactor of 70 leaves room in each page, so these updates, which
change no indexed column, are heap-only (HOT) updates: 91 % of them on that trace. Nothing
read or checked changes. It applies to pages filled from now on (existing pages are not
rewritten; ``VACUUM FULL`` would, under an exclusive lock: not done here).

``podgroup_state`` is left at 100: almost every update of it changes ``status``, a column of
the partial index ``ix_podgroup_state_running_queue``'s predicate, which no fillfactor makes
HOT (0 of 35,234 on that trace, with or without room). Downgrade resets the default.

(down_revision 0023: main's head when written, 0024 being merged then: re-chain to 0024.)
"""

from __future__ import annotations

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"

TABLE = "minruntime_state.pod_state"
# The share of each page (%) that inserts fill; the rest is for the rows' updates.
FILLFACTOR = 70


def upgrade() -> None:
    op.execute(f"ALTER TABLE {TABLE} SET (fillfactor = {FILLFACTOR})")


def downgrade() -> None:
    op.execute(f"ALTER TABLE {TABLE} RESET (fillfactor)")
