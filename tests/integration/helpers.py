"""Feeding events (built by tests/cloudevents.py) through ``apply_batch`` as Kafka would, and
the setup the integration tests share: a requeue cycle, a hand's SQL, a Kafka admin client."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import hypothesis
import sqlalchemy as sa
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from minruntime.audit.violations import ViolationReport, find_violations
from minruntime.ingest import BatchOutcome, InboundRecord, apply_batch
from minruntime.kafka_access import KafkaAccess, start_client
from minruntime.requeue import CycleReport, run_cycle
from minruntime.store.read_transactions import repeatable_read
from minruntime.store.unit import ReadUnit
from minruntime.stream.sink import BatchSink
from minruntime.topic_admin import FOREVER, TopicRole, TopicSpec, ensure_topics
from tests.cloudevents import T0, Event, Message, allocated, submitted
from tests.cloudevents import message as as_message

STATE_TABLES = (
    "queue_nodes",
    "queue_nodes_in_pool",
    "queue_tree_version",
    "node_pool_configs",
    "podgroup_state",
    "subgroup_state",
    "pod_state",
    "node_state",
    "nominations",
    "requeue_decision_log",
    "requeue_promises",
    "checkpoint_handshakes",
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
# The requeue worker's decisions topic, the requeue tests' now, and a job that over-runs by then.
TOPIC = "kai.requeue-decisions"
NOW = T0 + timedelta(hours=2)
OVERRUN = {"kai.scheduler/expected-runtime": "1h"}
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

    def apply(self, records: Sequence[InboundRecord], **options: Any) -> BatchOutcome:
        with self.engine.begin() as conn:
            return apply_batch(conn, records, consumer_group=self.group, **options)

    def send(self, *messages: Message | Event) -> BatchOutcome:
        return self.apply(self.records(*messages))


class Other:
    """Another instance: applies its batch on a thread, in a transaction of its own."""

    def __init__(self, engine: sa.Engine, records: Sequence[InboundRecord]) -> None:
        self.outcome: BatchOutcome | None = None
        self._thread = threading.Thread(target=self._run, args=(engine, records), daemon=True)
        self._thread.start()

    def _run(self, engine: sa.Engine, records: Sequence[InboundRecord]) -> None:
        self.outcome = Feed(engine).apply(records)

    def result(self, timeout: float = 60) -> BatchOutcome:
        self._thread.join(timeout)
        assert self.outcome is not None, "the other instance's batch did not finish"
        return self.outcome


def waiting_for_a_lock(engine: sa.Engine) -> bool:
    """Whether a session of the database is waiting for a lock."""
    return bool(
        scalar(
            engine,
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
    )


def sink(engine: sa.Engine) -> BatchSink:
    """The processor's batch sink on ``engine``, with no waits between its retries."""
    return BatchSink(
        engine,
        consumer_group=GROUP,
        topic_roles=ROLES,
        dead_letter_topic="kai.dead-letter",
        sleep=lambda _: None,
    )


def cycle(
    engine: sa.Engine, now: datetime = NOW, clock: Callable[[], datetime] | None = None
) -> CycleReport:
    """One requeue cycle at ``now`` in a REPEATABLE READ transaction, committed as the worker's."""
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            return run_cycle(conn, now=now, topic=TOPIC, clock=clock or (lambda: now))


def running_job(
    uid: str,
    gpus: int,
    *,
    annotations: Mapping[str, str] = OVERRUN,
    time: datetime = T0,
    **allocation: Any,
) -> list[Event]:
    """Queue ``team``'s job ``uid`` (priority 50; over-running its 1h by default) submitted
    and allocated ``gpus`` GPUs at ``time`` (``allocation``: more of ``allocated``'s)."""
    return [
        submitted(uid, "team", gpus, priority=50, annotations=annotations),
        allocated(uid, gpus, time=time, **allocation),
    ]


def gang(uid: str, pods: int, *, priority: int, **attributes: Any) -> Event:
    """A pending podgroup that needs all of its ``pods`` one-GPU pods at once."""
    return submitted(
        uid,
        "team",
        pods,
        priority=priority,
        sub_groups=[{"name": "default", "minAvailable": pods}],
        **attributes,
    )


@asynccontextmanager
async def kafka_admin(access: KafkaAccess) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started Kafka admin client, closed at the end."""
    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await start_client(admin, access)
    try:
        yield admin
    finally:
        await admin.close()


@asynccontextmanager
async def consuming(
    access: KafkaAccess, consumer: Any, producer: AIOKafkaProducer, topic: str
) -> AsyncIterator[None]:
    """``consumer`` (a BatchedConsumer) running for the block; then ``producer`` and the
    consumer stopped and ``topic`` deleted."""
    run = asyncio.create_task(consumer.run())
    try:
        yield
    finally:
        await producer.stop()
        await consumer.stop()
        await run
        async with kafka_admin(access) as admin:
            await admin.delete_topics([topic])


async def new_topic(access: KafkaAccess, role: TopicRole, prefix: str) -> str:
    """A fresh one-partition topic ``test.<prefix>.<8 hex digits>`` of ``role``, kept forever
    (delete it with ``kafka_admin``)."""
    name = f"test.{prefix}.{uuid.uuid4().hex[:8]}"
    await ensure_topics(access, [TopicSpec(role, name, 1, FOREVER)])
    return name


async def idempotent_producer(access: KafkaAccess) -> AIOKafkaProducer:
    """A started idempotent producer (``acks=all``); stop it at the end."""
    producer = AIOKafkaProducer(**access.client_kwargs(), enable_idempotence=True)
    await start_client(producer, access)
    return producer


async def until(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll ``check`` on the running event loop until true; fail naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def database_examples(max_examples: int) -> hypothesis.settings:
    """Hypothesis settings for examples fed to the database: each example empties the tables
    itself (so the function-scoped fixtures are safe to share), and each is slow."""
    return hypothesis.settings(
        max_examples=max_examples,
        suppress_health_check=[
            hypothesis.HealthCheck.function_scoped_fixture,
            hypothesis.HealthCheck.too_slow,
        ],
        deadline=None,
    )


def s(seconds: float) -> timedelta:
    """``seconds`` as a duration (the runs' windows are written in seconds)."""
    return timedelta(seconds=seconds)


def execute(engine: sa.Engine, *statements: str, **params: Any) -> None:
    """Run ``statements`` in one committed transaction (a hand changing the database)."""
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement), params)


def rows(engine: sa.Engine, query: str, **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(query), params))


def live_violations(engine: sa.Engine) -> ViolationReport:
    """``find_violations`` over the live state, in one repeatable-read transaction."""
    with repeatable_read(engine) as conn:
        return find_violations(ReadUnit(conn))


def columns(items: Sequence[Sequence[Any]], names: str) -> dict[str, list[Any]]:
    """Array parameters by name, one a letter of ``names``: the items' first, second, ... field."""
    return {name: [item[i] for item in items] for i, name in enumerate(names)}


def reclaim_protection(engine: sa.Engine, reclaimer: str, at: datetime) -> dict[str, Any]:
    """The rows of ``minruntime.reclaim_protection(reclaimer, at)`` by podgroup uid."""
    query = "SELECT * FROM minruntime.reclaim_protection(:q, :at)"
    return {r.uid: r for r in rows(engine, query, q=reclaimer, at=at)}


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
