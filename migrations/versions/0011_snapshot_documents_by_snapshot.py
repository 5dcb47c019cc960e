"""Snapshot documents are found by the snapshot that stored them.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25

``replay --verify`` checks each later snapshot for the podgroups named since the one before
and the ones the snapshot stores a document of; pruning re-assigns documents to the oldest
kept snapshot, and deleting snapshots checks the documents' foreign key. Each of these looked
documents up by ``snapshot_id`` with a scan of every document (hundreds of thousands on a log
of a million entries: ~0.1 s per snapshot checked). Downgrade drops the index.
"""

from __future__ import annotations

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"


def upgrade() -> None:
    op.create_index(
        "ix_projection_snapshot_podgroups_snapshot_id",
        "projection_snapshot_podgroups",
        ["snapshot_id"],
        schema="minruntime_state",
    )


def downgrade() -> None:
    op.drop_index(
        "ix_projection_snapshot_podgroups_snapshot_id",
        table_name="projection_snapshot_podgroups",
        schema="minruntime_state",
    )
