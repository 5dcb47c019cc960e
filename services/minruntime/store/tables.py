"""The base tables behind the SQL read surface (schema ``minruntime_state``).

The public, stable names (views and functions of CONTRACT.md §2) live in schema
``minruntime``; the tables they read live here, so the read-only role never needs, and never
gets, any privilege on this schema. Migration 0001 creates exactly these tables; an
integration test compares the two.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA, INTERVAL, JSONB, UUID

STATE_SCHEMA: Final = "minruntime_state"
READ_SCHEMA: Final = "minruntime"

# Constraint names are predictable, so a violation can be mapped back to its meaning.
NAMING_CONVENTION: Final = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(schema=STATE_SCHEMA, naming_convention=NAMING_CONVENTION)

_NOW = sa.text("now()")

queue_nodes = sa.Table(
    "queue_nodes",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("parent", sa.Text),
    sa.Column("preempt_min_runtime", INTERVAL),
    sa.Column("reclaim_min_runtime", INTERVAL),
    # Maintained by the projector with the core whenever the tree changes (rare): the
    # effective root→queue path, and for each field the result of the upward walk that
    # starts at this queue (value NULL and source NULL = no queue sets it: the default).
    sa.Column("path", ARRAY(sa.Text), nullable=False),
    sa.Column("preempt_resolved", INTERVAL),
    sa.Column("preempt_source", sa.Text),
    sa.Column("reclaim_resolved", INTERVAL),
    sa.Column("reclaim_source", sa.Text),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    # KAI's spec.priority and spec.resources as the wire carries them; NULL = unset (0019).
    sa.Column("priority", sa.Integer),
    sa.Column("resources", JSONB),
    # The node pool whose scheduler sees the queue (migration 0020); NULL = every pool. The
    # maintained columns above are the queue's in its pool's tree (for a queue of no pool:
    # in the tree of the queues of no pool, which is what a pool no queue names sees).
    sa.Column("node_pool", sa.Text),
    # The Queue's disruption overrides, annotation name -> value (migration 0023); NULL = none.
    sa.Column("disruption", JSONB),
)

# Maintained with queue_nodes (migration 0020): a queue of no pool as one node pool sees it,
# where that differs from its queue_nodes row (an ancestor of that pool above it).
queue_nodes_in_pool = sa.Table(
    "queue_nodes_in_pool",
    metadata,
    sa.Column("node_pool", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("path", ARRAY(sa.Text), nullable=False),
    sa.Column("preempt_resolved", INTERVAL),
    sa.Column("preempt_source", sa.Text),
    sa.Column("reclaim_resolved", INTERVAL),
    sa.Column("reclaim_source", sa.Text),
)

# One row: a random token replaced on every tree change, so a connection can tell whether
# the tree it cached is still current (a counter could repeat after a rollback).
queue_tree_version = sa.Table(
    "queue_tree_version",
    metadata,
    sa.Column("singleton", sa.Boolean, primary_key=True, server_default=sa.true()),
    sa.Column("version", UUID(as_uuid=True), nullable=False),
    sa.CheckConstraint("singleton", name="singleton"),
)

node_pool_configs = sa.Table(
    "node_pool_configs",
    metadata,
    sa.Column("node_pool", sa.Text, primary_key=True),
    sa.Column("default_preempt_min_runtime", INTERVAL, nullable=False),
    sa.Column("default_reclaim_min_runtime", INTERVAL, nullable=False),
    sa.Column("reclaim_resolve_method", sa.Text, nullable=False),
    sa.Column("default_requeue_delay", INTERVAL, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    # The requeue cap (migration 0016); NULL = unlimited / no window.
    sa.Column("max_requeues", sa.Integer),
    sa.Column("max_requeues_window", INTERVAL),
    # Disruption budget and pacing (migration 0021); NULL = off.
    sa.Column("max_evictions_per_window", sa.Integer),
    sa.Column("eviction_window", INTERVAL),
    sa.Column("min_eviction_gap", INTERVAL),
    sa.CheckConstraint("reclaim_resolve_method IN ('lca', 'queue')", name="method"),
)

podgroup_state = sa.Table(
    "podgroup_state",
    metadata,
    sa.Column("uid", sa.Text, primary_key=True),
    sa.Column("name", sa.Text),
    sa.Column("namespace", sa.Text),
    sa.Column("queue", sa.Text),
    sa.Column("node_pool", sa.Text, nullable=False, server_default="default"),
    sa.Column("priority", sa.BigInteger),
    sa.Column("preemptible", sa.Boolean, nullable=False, server_default=sa.true()),
    sa.Column("status", sa.Text, nullable=False),
    sa.Column("start_time", sa.DateTime(timezone=True)),
    sa.Column("last_start_time", sa.DateTime(timezone=True)),
    sa.Column("ended_at", sa.DateTime(timezone=True)),
    sa.Column("running_pods", sa.Integer, nullable=False, server_default="0"),
    sa.Column("is_elastic", sa.Boolean, nullable=False, server_default=sa.false()),
    # evictable_pods(pods, protected=True) from the core; unprotected it is running_pods.
    sa.Column("protected_evictable_pods", sa.Integer, nullable=False, server_default="0"),
    sa.Column("annotations", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    # Parsed from the annotations by the projector (NULL when absent or invalid).
    sa.Column("expected_runtime", INTERVAL),
    sa.Column("requeue_not_before", sa.DateTime(timezone=True)),
    # False for a placeholder made by an event that arrived before the submission.
    sa.Column("submitted", sa.Boolean, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    # Event time of the first submission: breaks priority ties between contenders (oldest first).
    sa.Column("submitted_at", sa.DateTime(timezone=True)),
    # A requeue was committed for the current run and the cluster has not released it yet:
    # it is not attempted again, and its GPUs count as freed. Cleared when the run ends.
    sa.Column("awaiting_release", sa.Boolean, nullable=False, server_default=sa.false()),
    # preemptible | non-preemptible | semi-preemptible (migration 0014); ``preemptible`` above
    # is written from it: not non-preemptible.
    sa.Column("preemptibility", sa.Text, nullable=False, server_default="preemptible"),
    # The preemption delay (migration 0015, docs/rule-engine.md "Preemption delay"): what the
    # submission set (its spec's valid value, else its pods' first: then the pod's name), the
    # end of the last run an eviction ended, KAI's last-eviction-timestamp as validated when it
    # came, and, derived, the end of the window (NULL: no delay) the requeue worker reads.
    sa.Column("submitted_preemption_delay", INTERVAL),
    sa.Column("submitted_preemption_delay_pod", sa.Text),
    sa.Column("evicted_at", sa.DateTime(timezone=True)),
    sa.Column("eviction_annotated_at", sa.DateTime(timezone=True)),
    sa.Column("preemption_delay_ends_at", sa.DateTime(timezone=True)),
    # The submission's topOwner (migration 0023); NULL = not carried (the annotation is read).
    sa.Column("owner_kind", sa.Text),
    sa.Column("owner_name", sa.Text),
    sa.Column("owner_uid", sa.Text),
    sa.CheckConstraint("status IN ('pending', 'running', 'finished', 'deleted')", name="status"),
    sa.CheckConstraint(
        "preemptibility IN ('preemptible', 'non-preemptible', 'semi-preemptible')",
        name="preemptibility",
    ),
    sa.Index(
        "ix_podgroup_state_running_queue", "queue", postgresql_where=sa.text("status = 'running'")
    ),
)

subgroup_state = sa.Table(
    "subgroup_state",
    metadata,
    sa.Column("uid", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("min_available", sa.Integer, nullable=False),
    sa.CheckConstraint("min_available >= 0", name="min_available"),
)

pod_state = sa.Table(
    "pod_state",
    metadata,
    sa.Column("uid", sa.Text, primary_key=True),
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("subgroup", sa.Text, nullable=False),
    # NULL until the submission says (a placeholder only knows the pod's name).
    sa.Column("gpu", sa.Numeric),
    sa.Column("node", sa.Text),
    sa.Column("allocated", sa.Boolean, nullable=False, server_default=sa.false()),
    # No index on node (migration 0010): pods are read by podgroup only, and allocations and
    # releases then update their rows in place (HOT).
)

node_state = sa.Table(
    "node_state",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("node_pool", sa.Text, nullable=False),
    sa.Column("gpu", sa.Numeric, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
)

nominations = sa.Table(
    "nominations",
    metadata,
    sa.Column("uid", sa.Text, primary_key=True),
    sa.Column("nominated_by", sa.Text, primary_key=True),
    sa.Column("reason", sa.Text),
    sa.Column("nominated_at", sa.DateTime(timezone=True), nullable=False),
)

requeue_decision_log = sa.Table(
    "requeue_decision_log",
    metadata,
    sa.Column("seq", sa.BigInteger, sa.Identity(always=False), primary_key=True),
    sa.Column("uid", sa.Text, nullable=False),
    sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("reason", sa.Text),
    sa.Column("nominated_by", ARRAY(sa.Text), nullable=False),
    sa.Column("beneficiaries", ARRAY(sa.Text), nullable=False),
    sa.Column("requeue_not_before", sa.DateTime(timezone=True)),
    # The decision event's CloudEvents id (also the outbox id and the Kafka header ``id``).
    sa.Column("decision_id", sa.Text, nullable=False),
    # Start time of the candidate's run (NULL when it was not running).
    sa.Column("run_start", sa.DateTime(timezone=True)),
    sa.Column("delay_problem", sa.Text),
    sa.Column("placements", JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
    # Rolled back for preemption_delay: the earliest instant a beneficiary's window ends.
    sa.Column("delay_ends_at", sa.DateTime(timezone=True)),
    # Rolled back for beneficiary_over_quota: the rule and both queues' shares (0019).
    sa.Column("quota_shares", JSONB),
    sa.CheckConstraint(
        "outcome IN ('committed', 'rolled_back', 'skipped', 'abandoned')", name="outcome"
    ),
    sa.UniqueConstraint("decision_id"),
    sa.Index("ix_requeue_decision_log_uid", "uid", "decided_at"),
    # The requeue cap's count: a podgroup's newest commits (migration 0016).
    sa.Index(
        "ix_requeue_decision_log_committed",
        "uid",
        sa.text("decided_at DESC"),
        postgresql_where=sa.text("outcome = 'committed'"),
    ),
)

# The evictor's checkpoint handshakes (requeue.checkpoint, migration 0024): one per committed
# requeue whose PodGroup declared a checkpoint grace, as it ended (acknowledged, timed_out,
# gone), before the eviction. Keyed by the decision (the event's id is "<decision>.checkpoint").
checkpoint_handshakes = sa.Table(
    "checkpoint_handshakes",
    metadata,
    sa.Column("decision_id", sa.Text, primary_key=True),
    sa.Column("uid", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("grace", INTERVAL, nullable=False),
    sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("checkpointed_at", sa.DateTime(timezone=True)),
    sa.CheckConstraint("outcome IN ('acknowledged', 'timed_out', 'gone')", name="outcome"),
    sa.Index("ix_checkpoint_handshakes_uid", "uid", "requested_at"),
)

# Capacity freed by a committed requeue and promised to its beneficiary: not handed out again
# until the beneficiary is allocated, finishes or is deleted, or the promise lapses.
requeue_promises = sa.Table(
    "requeue_promises",
    metadata,
    sa.Column("decision_id", sa.Text, primary_key=True),
    sa.Column("beneficiary", sa.Text, primary_key=True),
    sa.Column("node", sa.Text, primary_key=True),
    sa.Column("victim", sa.Text, nullable=False),
    sa.Column("gpu", sa.Numeric, nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_requeue_promises_beneficiary", "beneficiary"),
)

# Every run that ended (SEMANTICS.md §10): written by the podgroup projection at the event that
# ended it, with the rule windows in force then (migration 0013; docs/storage.md, "Runs").
# Append-only history: keyed by the podgroup and the (source, id) of the ending event.
run_log = sa.Table(
    "run_log",
    metadata,
    sa.Column("uid", sa.Text, primary_key=True),
    sa.Column("end_source", sa.Text, primary_key=True),
    sa.Column("end_event_id", sa.Text, primary_key=True),
    # NULL for a placeholder (never submitted).
    sa.Column("queue", sa.Text),
    sa.Column("node_pool", sa.Text, nullable=False),
    sa.Column("preemptibility", sa.Text, nullable=False),
    sa.Column("run_start", sa.DateTime(timezone=True), nullable=False),
    sa.Column("run_end", sa.DateTime(timezone=True), nullable=False),
    sa.Column("ended_by", sa.Text, nullable=False),
    sa.Column("eviction", sa.Boolean, nullable=False),
    # NULL when a pod's GPU is not known.
    sa.Column("gpus", sa.Numeric),
    sa.Column("gpu_seconds", sa.Numeric),
    sa.Column("preempt_min_runtime", INTERVAL, nullable=False),
    sa.Column("preempt_resolved_from", sa.Text),
    sa.Column("shortest_reclaim_min_runtime", INTERVAL, nullable=False),
    sa.Column("longest_reclaim_min_runtime", INTERVAL, nullable=False),
    # Every rule window at the end, as JSON text: [{rule, reclaimers, lca, walk_start,
    # min_runtime (s), resolved_from}] (minruntime.core.violation; a window's end: run_start +
    # min_runtime). Text, not jsonb: a batch writes one per run, and parsing it into jsonb cost
    # the server as much as the rest of the row; the view shows it as jsonb.
    sa.Column("windows", sa.Text, nullable=False),
    sa.Column("protection", sa.Text, nullable=False),
    # What was left of the longest window still protecting it (NULL: none was).
    sa.Column("cut_short", INTERVAL),
    # The semi-preemptible core it still held at its end (0: none; migration 0014).
    sa.Column("core_pods", sa.Integer, nullable=False, server_default="0"),
    # The run's top owner (kai.scheduler/top-owner-metadata when it ended; migration 0021).
    sa.Column("owner_kind", sa.Text),
    sa.Column("owner_name", sa.Text),
    sa.Column("owner_uid", sa.Text),
    # Its last checkpoint when it ended (minruntime.kai.scheduler/checkpointed-at; NULL: none
    # known) and, for a run an eviction ended, the GPU-seconds since it: the work really lost
    # (migration 0022).
    sa.Column("last_checkpoint", sa.DateTime(timezone=True)),
    sa.Column("gpu_seconds_since_checkpoint", sa.Numeric),
    # Who evicted it, as the scheduler said (migration 0018; NULL: not known): which trace said
    # it (event | annotation | condition), the action, the evicting podgroup "ns/name", its
    # queue, and when the scheduler evicted.
    sa.Column("eviction_source", sa.Text),
    sa.Column("eviction_action", sa.Text),
    sa.Column("evictor", sa.Text),
    sa.Column("evictor_queue", sa.Text),
    sa.Column("evicted_at", sa.DateTime(timezone=True)),
    # The verdict under the one rule the attributed eviction met (core.attribution): violated |
    # honoured | unguarded; NULL without an attribution that names a rule.
    sa.Column("exact_verdict", sa.Text),
    # That rule's window (one item as in ``windows``; NULL: none applied), its minimum runtime,
    # and what was left of it at the eviction's instant (NULL: nothing).
    sa.Column("applied_window", sa.Text),
    sa.Column("applied_min_runtime", INTERVAL),
    sa.Column("applied_cut_short", INTERVAL),
    sa.CheckConstraint("protection IN ('definite', 'possible', 'none')", name="protection"),
    sa.CheckConstraint(
        "exact_verdict IN ('violated', 'honoured', 'unguarded')", name="exact_verdict"
    ),
    # What `minruntime violations` reads: the runs an eviction ended inside a window, and the
    # ones whose attributed eviction broke the rule that applied.
    sa.Index(
        "ix_run_log_violations",
        "run_end",
        postgresql_where=sa.text(
            "eviction AND (protection <> 'none' OR exact_verdict = 'violated')"
        ),
    ),
)

event_log = sa.Table(
    "event_log",
    metadata,
    sa.Column("seq", sa.BigInteger, sa.Identity(always=False), primary_key=True),
    sa.Column("topic", sa.Text, nullable=False),
    # NULL for the events the service itself decided (requeue decisions): they are logged in
    # the transaction that makes them, before Kafka assigns an offset.
    sa.Column("partition", sa.Integer),
    sa.Column("offset", sa.BigInteger),
    sa.Column("event_id", sa.Text, nullable=False),
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("subject", sa.Text),
    sa.Column("event_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("payload", JSONB, nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    # The de-duplication key of CONTRACT.md §1.
    sa.UniqueConstraint("source", "event_id"),
    sa.Index("ix_event_log_subject", "subject", "seq"),
)

dead_letter_log = sa.Table(
    "dead_letter_log",
    metadata,
    sa.Column("seq", sa.BigInteger, sa.Identity(always=False), primary_key=True),
    sa.Column("topic", sa.Text, nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("offset", sa.BigInteger, nullable=False),
    sa.Column("key", BYTEA),
    sa.Column("value", BYTEA),
    # The same bytes as text when they are valid UTF-8 (NULL otherwise), for people.
    sa.Column("key_text", sa.Text),
    sa.Column("value_text", sa.Text),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    # The record's headers in order (NULL without any): [{"name", "value", "valueEncoding"}],
    # a value as UTF-8 text or base64 (migration 0012; a binary-mode CloudEvent's attributes).
    sa.Column("headers", JSONB),
    sa.UniqueConstraint("topic", "partition", "offset"),
    sa.Index("ix_dead_letter_log_kind", "kind"),
)

consumer_offsets = sa.Table(
    "consumer_offsets",
    metadata,
    sa.Column("consumer_group", sa.Text, primary_key=True),
    sa.Column("topic", sa.Text, primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    # The offset of the next record to apply (Kafka's convention for committed offsets).
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    # Kafka's ID of the topic these offsets were read from (0007): another ID means another
    # life of the topic, whose offsets these are not. NULL: not tied yet.
    sa.Column("topic_id", sa.Text),
)

outbox = sa.Table(
    "outbox",
    metadata,
    # Stable de-duplication id, sent as a header; consumers drop repeats after a relay crash.
    sa.Column("id", UUID(as_uuid=True), primary_key=True),
    sa.Column("topic", sa.Text, nullable=False),
    sa.Column("key", BYTEA),
    sa.Column("payload", BYTEA, nullable=False),
    sa.Column("headers", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    sa.Column("published_at", sa.DateTime(timezone=True)),
    # Set aside: the broker refused the row for a reason that will not change (migration 0006).
    sa.Column("failed_at", sa.DateTime(timezone=True)),
    sa.Column("failure", sa.Text),
    # Failed publishes of this row, retriable ones included.
    sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
    sa.Index(
        "ix_outbox_unpublished", "created_at", postgresql_where=sa.text("published_at IS NULL")
    ),
    sa.Index(
        "ix_outbox_pending",
        "created_at",
        postgresql_where=sa.text("published_at IS NULL AND failed_at IS NULL"),
    ),
)

# Periodic copies of the projections (``minruntime snapshot``, docs/audit.md#snapshots): the
# state after every event-log entry up to ``log_seq`` and none after it. As-of answers start
# from the newest one at or before their instant and replay only the tail; ``replay
# --verify`` checks each against a replay of the log up to its position. Not projections:
# a shadow has none of these tables.
projection_snapshots = sa.Table(
    "projection_snapshots",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
    # The last event_log seq it reflects (every entry up to it applied, none after).
    sa.Column("log_seq", sa.BigInteger, nullable=False),
    # The latest applied_at among those entries: an answer at T >= this may start here.
    sa.Column("applied_until", sa.DateTime(timezone=True)),
    # The earliest applied_at of the entries with a seq in (since_seq, log_seq] (since_seq:
    # the taker's previous snapshot's log_seq, 0 without one; migration 0026, NULL: not
    # known). None of them was applied before it: an answer at an earlier instant skips them
    # (store.snapshots.quiet_spans).
    sa.Column("since_seq", sa.BigInteger),
    sa.Column("applied_from", sa.DateTime(timezone=True)),
    # How many event-log entries it reflects.
    sa.Column("events", sa.BigInteger, nullable=False),
    sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False, server_default=_NOW),
    # The uids of the podgroups pending or running then: a zlib-compressed JSON list.
    sa.Column("podgroups", BYTEA, nullable=False),
    sa.UniqueConstraint("log_seq"),
)

# One projection table of one snapshot (not the podgroup tables): its rows as zlib-compressed
# COPY text, in key order. The row named podgroup_state is the active block: that table's rows
# of the podgroups pending or running only (store.snapshots.ACTIVE_BLOCK).
projection_snapshot_tables = sa.Table(
    "projection_snapshot_tables",
    metadata,
    sa.Column(
        "snapshot_id",
        sa.BigInteger,
        sa.ForeignKey("projection_snapshots.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("table_name", sa.Text, primary_key=True),
    sa.Column("rows", sa.BigInteger, nullable=False),
    # The COPY column list the data was written with (restored with the same list).
    sa.Column("columns", ARRAY(sa.Text), nullable=False),
    sa.Column("data", BYTEA, nullable=False),
)

# A podgroup's rows (every podgroup table) as of a snapshot, stored when they differ from its
# newest stored document: "table<TAB>COPY line" lines.
projection_snapshot_podgroups = sa.Table(
    "projection_snapshot_podgroups",
    metadata,
    sa.Column("uid", sa.Text, primary_key=True),
    sa.Column("log_seq", sa.BigInteger, primary_key=True),
    sa.Column(
        "snapshot_id",
        sa.BigInteger,
        # No cascade: a document serves every later snapshot until the podgroup's next one,
        # so the snapshot that stored it cannot be deleted alone.
        sa.ForeignKey("projection_snapshots.id", name="fk_projection_snapshot_podgroups_snapshot"),
        nullable=False,
    ),
    sa.Column("document", BYTEA, nullable=False),
    # The documents a snapshot stored: its check by replay --verify, pruning (migration 0011).
    sa.Index("ix_projection_snapshot_podgroups_snapshot_id", "snapshot_id"),
)

SNAPSHOT_TABLES: Final = frozenset(
    {"projection_snapshots", "projection_snapshot_tables", "projection_snapshot_podgroups"}
)
