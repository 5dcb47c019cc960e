"""Feeding events (built by tests/cloudevents.py) through ``apply_batch`` as Kafka would."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from minruntime.ingest import BatchOutcome, InboundRecord, apply_batch
from minruntime.stream.sink import BatchSink
from tests.cloudevents import Event, Message
from tests.cloudevents import message as as_message

STATE_TABLES = (
    "queue_nodes",
    "queue_tree_version",
    "node_pool_configs",
    "podgroup_state",
    "subgroup_state",
    "pod_state",
    "node_state",
    "nominations",
    "requeue_decision_log",
    "requeue_promises",
    "run_log",
    "event_log",
    "dead_letter_log",
    "consumer_offsets",
    "outbox",
    "projection_snapshots",
    "projection_snapshot_tables",
    "projection_snapshot_podgroups",
)

GROUP = "test-processor"
# A test-only index whose row for a node named "huge-..." outgrows PostgreSQL's btree limit: a
# real refusal (SQLSTATE 54000) that no decoder bound prevents. Dropped by DROP_HUGE_INDEX.
HUGE_INDEX = (
    "CREATE FUNCTION minruntime_state.test_widen(text) RETURNS text IMMUTABLE LANGUAGE sql"
    " AS $$ SELECT CASE WHEN $1 LIKE 'huge-%' THEN (SELECT string_agg(md5($1 || i), '')"
    " FROM generate_series(1, 400) i) ELSE $1 END $$",
    "CREATE INDEX test_huge ON minruntime_state.node_state (minruntime_state.test_widen(name))",
)
DROP_HUGE_INDEX = (
    "DROP INDEX minruntime_state.test_huge",
    "DROP FUNCTION minruntime_state.test_widen(text)",
)
# The input topics by role, as the processor's sink maps them.
ROLES = {"kai.queues": "queues", "kai.podgroups": "podgroups", "kai.nodes": "nodes"}


class Feed:
    """Assigns Kafka offsets per (topic, partition 0) and applies batches in one transaction."""

    def __init__(self, engine: sa.Engine, group: str = GROUP) -> None:
        self.engine = engine
        self.group = group
        self.offsets: dict[str, int] = defaultdict(int)

    def records(self, *messages: Message | Event) -> list[InboundRecord]:
        out = []
        for each in messages:
            message = each if isinstance(each, Message) else as_message(each)
            offset = self.offsets[message.topic]
            self.offsets[message.topic] += 1
            out.append(InboundRecord(message.topic, 0, offset, message.key, message.value, None))
        return out

    def apply(self, records: Sequence[InboundRecord]) -> BatchOutcome:
        with self.engine.begin() as conn:
            return apply_batch(conn, records, consumer_group=self.group)

    def send(self, *messages: Message | Event) -> BatchOutcome:
        return self.apply(self.records(*messages))


def sink(engine: sa.Engine) -> BatchSink:
    """The processor's batch sink on ``engine``, with no waits between its retries."""
    return BatchSink(
        engine,
        consumer_group=GROUP,
        topic_roles=ROLES,
        dead_letter_topic="kai.dead-letter",
        sleep=lambda _: None,
    )


def rows(engine: sa.Engine, query: str, **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(query), params))


def scalar(engine: sa.Engine, query: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text(query), params).scalar()


def reset_state(engine: sa.Engine) -> None:
    """Empty every state table (what each test starts from; hypothesis examples call it too)."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "TRUNCATE "
                + ", ".join(f"minruntime_state.{table}" for table in STATE_TABLES)
                + " RESTART IDENTITY"
            )
        )


def assert_replay_equal(engine: sa.Engine, name: str) -> None:
    """A replay of the whole log into shadow ``name`` rebuilds every projection exactly."""
    from minruntime.audit.replay import read_log, replay
    from minruntime.audit.verify import compare
    from minruntime.store.read_transactions import repeatable_read
    from minruntime.store.shadows import create_shadow

    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, name)
        replay(conn, read_log(conn), into=shadow.tables)
        assert [check.table for check in compare(conn, shadow) if not check.equal] == []
