"""A gang whose run an eviction ended is pending again, not finished (SEMANTICS.md §10).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26

KAI requeues an evicted gang: it waits to be scheduled again. The fold now says so
(``PodGroupState.status``): a run ended by ``evicted``, ``preempted`` or ``requeued`` (or a
release without a reason while a committed requeue waited) leaves the podgroup ``pending`` —
a possible requeue beneficiary again, with its preemption delay re-armed — where it said
``finished`` before. Existing podgroups take the status a replay of the log gives them.

Projection snapshots taken before hold podgroups as the older fold derived them (and without
the columns of 0014 and 0015): ``replay --verify`` would report them as different from the
log. They are derived data, so they are removed; as-of answers replay from the start until
the next ``minruntime snapshot``. Downgrade sets those podgroups back to ``finished``.
"""

from __future__ import annotations

from alembic import op
from revision_parts import STATE, log_is_empty

revision: str = "0017"
down_revision: str | None = "0016"


def upgrade() -> None:
    for table in (
        "projection_snapshot_podgroups",
        "projection_snapshot_tables",
        "projection_snapshots",
    ):
        op.execute(f"DELETE FROM {STATE}.{table}")
    if log_is_empty():
        return
    # Lazily: only a database with a log needs the replay machinery.
    from minruntime.audit.runs import backfill_podgroup_columns

    backfill_podgroup_columns(op.get_bind(), ["status"])


def downgrade() -> None:
    op.execute(
        f"UPDATE {STATE}.podgroup_state SET status = 'finished'"
        " WHERE status = 'pending' AND last_start_time IS NOT NULL"
    )
