"""Base tables of the projections, the event log, dead letters, offsets and the outbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA, INTERVAL, JSONB, UUID

revision: str = "0001"
down_revision: str | None = None

S = "minruntime_state"
TZ = sa.DateTime(timezone=True)
NOW = sa.text("now()")


def upgrade() -> None:
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {S}")
    op.create_table(
        "queue_nodes",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("parent", sa.Text),
        sa.Column("preempt_min_runtime", INTERVAL),
        sa.Column("reclaim_min_runtime", INTERVAL),
        sa.Column("path", ARRAY(sa.Text), nullable=False),
        sa.Column("preempt_resolved", INTERVAL),
        sa.Column("preempt_source", sa.Text),
        sa.Column("reclaim_resolved", INTERVAL),
        sa.Column("reclaim_source", sa.Text),
        sa.Column("updated_at", TZ, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("name", name="pk_queue_nodes"),
        schema=S,
    )
    op.create_table(
        "queue_tree_version",
        sa.Column("singleton", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("version", UUID(as_uuid=True), nullable=False),
        sa.PrimaryKeyConstraint("singleton", name="pk_queue_tree_version"),
        sa.CheckConstraint("singleton", name="ck_queue_tree_version_singleton"),
        schema=S,
    )
    op.create_table(
        "node_pool_configs",
        sa.Column("node_pool", sa.Text, nullable=False),
        sa.Column("default_preempt_min_runtime", INTERVAL, nullable=False),
        sa.Column("default_reclaim_min_runtime", INTERVAL, nullable=False),
        sa.Column("reclaim_resolve_method", sa.Text, nullable=False),
        sa.Column("default_requeue_delay", INTERVAL, nullable=False),
        sa.Column("updated_at", TZ, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("node_pool", name="pk_node_pool_configs"),
        sa.CheckConstraint(
            "reclaim_resolve_method IN ('lca', 'queue')", name="ck_node_pool_configs_method"
        ),
        schema=S,
    )
    op.create_table(
        "podgroup_state",
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("name", sa.Text),
        sa.Column("namespace", sa.Text),
        sa.Column("queue", sa.Text),
        sa.Column("node_pool", sa.Text, nullable=False, server_default="default"),
        sa.Column("priority", sa.BigInteger),
        sa.Column("preemptible", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("start_time", TZ),
        sa.Column("last_start_time", TZ),
        sa.Column("ended_at", TZ),
        sa.Column("running_pods", sa.Integer, nullable=False, server_default="0"),
        sa.Column("is_elastic", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("protected_evictable_pods", sa.Integer, nullable=False, server_default="0"),
        sa.Column("annotations", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("expected_runtime", INTERVAL),
        sa.Column("requeue_not_before", TZ),
        sa.Column("submitted", sa.Boolean, nullable=False),
        sa.Column("updated_at", TZ, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("uid", name="pk_podgroup_state"),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'finished', 'deleted')",
            name="ck_podgroup_state_status",
        ),
        schema=S,
    )
    op.create_index(
        "ix_podgroup_state_running_queue",
        "podgroup_state",
        ["queue"],
        schema=S,
        postgresql_where=sa.text("status = 'running'"),
    )
    op.create_table(
        "subgroup_state",
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("min_available", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("uid", "name", name="pk_subgroup_state"),
        sa.CheckConstraint("min_available >= 0", name="ck_subgroup_state_min_available"),
        schema=S,
    )
    op.create_table(
        "pod_state",
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("subgroup", sa.Text, nullable=False),
        sa.Column("gpu", sa.Numeric),
        sa.Column("node", sa.Text),
        sa.Column("allocated", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.PrimaryKeyConstraint("uid", "name", name="pk_pod_state"),
        schema=S,
    )
    op.create_index(
        "ix_pod_state_node", "pod_state", ["node"], schema=S, postgresql_where=sa.text("allocated")
    )
    op.create_table(
        "node_state",
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("node_pool", sa.Text, nullable=False),
        sa.Column("gpu", sa.Numeric, nullable=False),
        sa.Column("updated_at", TZ, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("name", name="pk_node_state"),
        schema=S,
    )
    op.create_table(
        "nominations",
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("nominated_by", sa.Text, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("nominated_at", TZ, nullable=False),
        sa.PrimaryKeyConstraint("uid", "nominated_by", name="pk_nominations"),
        schema=S,
    )
    op.create_table(
        "requeue_decision_log",
        sa.Column("seq", sa.BigInteger, sa.Identity(always=False), nullable=False),
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("decided_at", TZ, nullable=False),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("nominated_by", ARRAY(sa.Text), nullable=False),
        sa.Column("beneficiaries", ARRAY(sa.Text), nullable=False),
        sa.Column("requeue_not_before", TZ),
        sa.PrimaryKeyConstraint("seq", name="pk_requeue_decision_log"),
        sa.CheckConstraint(
            "outcome IN ('committed', 'rolled_back', 'skipped')",
            name="ck_requeue_decision_log_outcome",
        ),
        schema=S,
    )
    op.create_index(
        "ix_requeue_decision_log_uid", "requeue_decision_log", ["uid", "decided_at"], schema=S
    )
    op.create_table(
        "event_log",
        sa.Column("seq", sa.BigInteger, sa.Identity(always=False), nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("event_id", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("subject", sa.Text),
        sa.Column("event_time", TZ, nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("applied_at", TZ, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("seq", name="pk_event_log"),
        sa.UniqueConstraint("source", "event_id", name="uq_event_log_source_event_id"),
        schema=S,
    )
    op.create_index("ix_event_log_subject", "event_log", ["subject", "seq"], schema=S)
    op.create_table(
        "dead_letter_log",
        sa.Column("seq", sa.BigInteger, sa.Identity(always=False), nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("offset", sa.BigInteger, nullable=False),
        sa.Column("key", BYTEA),
        sa.Column("value", BYTEA),
        sa.Column("key_text", sa.Text),
        sa.Column("value_text", sa.Text),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("at", TZ, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("seq", name="pk_dead_letter_log"),
        sa.UniqueConstraint(
            "topic", "partition", "offset", name="uq_dead_letter_log_topic_partition_offset"
        ),
        schema=S,
    )
    op.create_index("ix_dead_letter_log_kind", "dead_letter_log", ["kind"], schema=S)
    op.create_table(
        "consumer_offsets",
        sa.Column("consumer_group", sa.Text, nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
        sa.Column("updated_at", TZ, nullable=False, server_default=NOW),
        sa.PrimaryKeyConstraint("consumer_group", "topic", "partition", name="pk_consumer_offsets"),
        schema=S,
    )
    op.create_table(
        "outbox",
        sa.Column("id", UUID(as_uuid=True), nullable=False),
        sa.Column("topic", sa.Text, nullable=False),
        sa.Column("key", BYTEA),
        sa.Column("payload", BYTEA, nullable=False),
        sa.Column("headers", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.Column("created_at", TZ, nullable=False, server_default=NOW),
        sa.Column("published_at", TZ),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
        schema=S,
    )
    op.create_index(
        "ix_outbox_unpublished",
        "outbox",
        ["created_at"],
        schema=S,
        postgresql_where=sa.text("published_at IS NULL"),
    )


def downgrade() -> None:
    for table in (
        "outbox",
        "consumer_offsets",
        "dead_letter_log",
        "event_log",
        "requeue_decision_log",
        "nominations",
        "node_state",
        "pod_state",
        "subgroup_state",
        "podgroup_state",
        "node_pool_configs",
        "queue_tree_version",
        "queue_nodes",
    ):
        op.drop_table(table, schema=S)
