"""Semi-preemptible podgroups: ``preemptibility`` stored, and a core never evictable.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27

``podgroup_state.preemptibility`` holds one of ``preemptible``, ``non-preemptible`` or
``semi-preemptible`` (SEMANTICS.md §10). The rows stored before keep meaning what their
``preemptible`` flag said (true: preemptible, false: non-preemptible); the flag stays, written
as ``preemptibility <> 'non-preemptible'`` (some of its pods may be evicted).

A semi-preemptible podgroup's core — each subgroup's minAvailable running pods — is never
evictable, protected or not: ``evictable_pods`` of the ``preempt_protection`` view and of the
``preempt_protection(at)`` and ``reclaim_protection(q, at)`` functions is then the stored
``protected_evictable_pods`` (Σ max(0, running − minAvailable): the pods above the core) at
every instant. ``is_protected`` stays the minimum-runtime window: the core is not a window.

``run_log.core_pods``: the core a run still held when it ended (0 for the runs before: no
podgroup was semi-preemptible). ``minruntime.podgroups`` gains ``preemptibility`` and
``minruntime.runs`` gains ``core_pods``, both at the end. Downgrade restores the 0013 read
surface and drops the columns (a semi-preemptible podgroup then reads as preemptible).
"""

from __future__ import annotations

from alembic import op
from revision_parts import (
    EVICTABLE_0002,
    EVICTABLE_0014,
    RUNS_COLUMNS_0013,
    STATE,
    preempt_protection_at,
    preempt_protection_view,
    reclaim_protection,
    view_made_again,
)

revision: str = "0014"
down_revision: str | None = "0013"

_PODGROUPS_COLUMNS = """uid, name, namespace, queue, node_pool, priority, preemptible, status,
       start_time, running_pods, is_elastic, expected_runtime, requeue_not_before,
       last_start_time, ended_at, annotations, submitted, updated_at,
       submitted_at, awaiting_release"""
UPGRADE_SQL = f"""
ALTER TABLE {STATE}.podgroup_state
    ADD COLUMN preemptibility text NOT NULL DEFAULT 'preemptible',
    ADD CONSTRAINT ck_podgroup_state_preemptibility
        CHECK (preemptibility IN ('preemptible', 'non-preemptible', 'semi-preemptible'));
-- The rows before: what their flag said (the new column's default covers the preemptible ones).
UPDATE {STATE}.podgroup_state SET preemptibility = 'non-preemptible' WHERE NOT preemptible;

ALTER TABLE {STATE}.run_log ADD COLUMN core_pods integer NOT NULL DEFAULT 0;

CREATE OR REPLACE VIEW minruntime.podgroups AS
SELECT {_PODGROUPS_COLUMNS},
       preemptibility
FROM {STATE}.podgroup_state;

CREATE OR REPLACE VIEW minruntime.runs AS
SELECT {RUNS_COLUMNS_0013},
       core_pods
FROM {STATE}.run_log;
{preempt_protection_view(EVICTABLE_0014)}
{preempt_protection_at(EVICTABLE_0014)}
{reclaim_protection(EVICTABLE_0014, with_semi=True)}
"""

# Views lose columns only by being made again (grants go with them).
DOWNGRADE_SQL = f"""
{view_made_again("podgroups", _PODGROUPS_COLUMNS, f"{STATE}.podgroup_state")}

{view_made_again("runs", RUNS_COLUMNS_0013, f"{STATE}.run_log")}
{preempt_protection_view(EVICTABLE_0002)}
{preempt_protection_at(EVICTABLE_0002)}
{reclaim_protection(EVICTABLE_0002, with_semi=False)}
ALTER TABLE {STATE}.run_log DROP COLUMN core_pods;
ALTER TABLE {STATE}.podgroup_state DROP COLUMN preemptibility;
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
