"""What the requeue worker records: decision ids and runs, promises, awaiting release.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21

- ``podgroup_state.submitted_at`` (contender tie-break) and ``awaiting_release`` (a committed
  requeue the cluster has not carried out yet);
- ``requeue_decision_log``: the decision event's id, the run it concerns, why a requeue-delay
  annotation was ignored, and the beneficiaries' placements;
- ``requeue_promises``: capacity promised to beneficiaries, and its public view;
- ``event_log.partition`` / ``offset`` become NULL-able: decisions are logged in the
  transaction that makes them, before Kafka assigns an offset.
"""

from __future__ import annotations

from alembic import op
from revision_parts import DECISIONS_VIEW_0002, PODGROUPS_VIEW_0002, READER

revision: str = "0003"
down_revision: str | None = "0002"

UPGRADE_SQL = f"""
ALTER TABLE minruntime_state.podgroup_state
    ADD COLUMN submitted_at timestamptz,
    ADD COLUMN awaiting_release boolean NOT NULL DEFAULT false;

ALTER TABLE minruntime_state.requeue_decision_log
    ADD COLUMN decision_id text,
    ADD COLUMN run_start timestamptz,
    ADD COLUMN delay_problem text,
    ADD COLUMN placements jsonb NOT NULL DEFAULT '[]'::jsonb;
UPDATE minruntime_state.requeue_decision_log SET decision_id = 'seq-' || seq
    WHERE decision_id IS NULL;
ALTER TABLE minruntime_state.requeue_decision_log
    ALTER COLUMN decision_id SET NOT NULL,
    ADD CONSTRAINT uq_requeue_decision_log_decision_id UNIQUE (decision_id);

CREATE TABLE minruntime_state.requeue_promises (
    decision_id text NOT NULL,
    beneficiary text NOT NULL,
    node text NOT NULL,
    victim text NOT NULL,
    gpu numeric NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT pk_requeue_promises PRIMARY KEY (decision_id, beneficiary, node)
);
CREATE INDEX ix_requeue_promises_beneficiary ON minruntime_state.requeue_promises (beneficiary);

ALTER TABLE minruntime_state.event_log
    ALTER COLUMN partition DROP NOT NULL,
    ALTER COLUMN "offset" DROP NOT NULL;

CREATE OR REPLACE VIEW minruntime.podgroups AS
SELECT uid, name, namespace, queue, node_pool, priority, preemptible, status, start_time,
       running_pods, is_elastic, expected_runtime, requeue_not_before,
       last_start_time, ended_at, annotations, submitted, updated_at,
       submitted_at, awaiting_release
FROM minruntime_state.podgroup_state;

CREATE OR REPLACE VIEW minruntime.requeue_decisions AS
SELECT uid, decided_at, outcome, reason, nominated_by, beneficiaries, requeue_not_before, seq,
       decision_id, run_start, delay_problem, placements
FROM minruntime_state.requeue_decision_log;

-- Promises still in force at now(): capacity a committed requeue freed for a beneficiary.
CREATE VIEW minruntime.requeue_promises AS
SELECT decision_id, victim, beneficiary, node, gpu, expires_at
FROM minruntime_state.requeue_promises
WHERE expires_at > now();

GRANT SELECT ON minruntime.requeue_promises TO {READER};
"""

DOWNGRADE_SQL = f"""
DROP VIEW minruntime.requeue_promises;
DROP VIEW minruntime.requeue_decisions;
{DECISIONS_VIEW_0002}
DROP VIEW minruntime.podgroups;
{PODGROUPS_VIEW_0002}
GRANT SELECT ON minruntime.requeue_decisions, minruntime.podgroups TO {READER};

DELETE FROM minruntime_state.event_log WHERE partition IS NULL OR "offset" IS NULL;
ALTER TABLE minruntime_state.event_log
    ALTER COLUMN partition SET NOT NULL,
    ALTER COLUMN "offset" SET NOT NULL;

DROP TABLE minruntime_state.requeue_promises;

ALTER TABLE minruntime_state.requeue_decision_log
    DROP COLUMN decision_id,
    DROP COLUMN run_start,
    DROP COLUMN delay_problem,
    DROP COLUMN placements;

ALTER TABLE minruntime_state.podgroup_state
    DROP COLUMN submitted_at,
    DROP COLUMN awaiting_release;
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
