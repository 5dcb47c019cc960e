"""The store (``minruntime.store``) against real PostgreSQL, on the live schema and on a shadow.

Every store function runs twice: once on the live tables, once on a shadow's, through a
connection that was never marked for the shadow (the ``StateTables`` alone decides where
the statements go). On the shadow run, the live tables must stay empty.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import sqlalchemy as sa

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    Allocation,
    MinRuntimeConfig,
    PodGroupState,
    Preemptibility,
    Queue,
    QueueTree,
    Release,
    SubGroup,
    Submission,
    fold,
)
from minruntime.core.topic_life import StoredOffset, TopicLife
from minruntime.errors import SchemaNameError, TopicLifeChangedError
from minruntime.ingest.queues import resolved_rows
from minruntime.store import (
    decisions,
    event_log,
    node_pools,
    offsets,
    outbox,
    podgroups,
    queues,
    requeue,
)
from minruntime.store.dead_letters import first_dead_letter, record_dead_letters
from minruntime.store.schema import LIVE, StateTables, state_tables
from minruntime.store.shadows import create_shadow, drop_shadow, temporary_name
from minruntime.store.tables import metadata

T0 = datetime(2025, 1, 1, tzinfo=UTC)
GROUP = "minruntime-processor"


@dataclass
class Store:
    conn: sa.Connection
    tables: StateTables

    def count(self, table: str) -> int:
        return int(
            self.conn.execute(
                sa.text(f"SELECT count(*) FROM {self.tables.schema}.{table}")
            ).scalar_one()
        )


@pytest.fixture(params=["live", "shadow"])
def store(request: pytest.FixtureRequest, engine: sa.Engine) -> Iterator[Store]:
    """A connection in a transaction (rolled back) and the tables of the live schema or a
    shadow's; the shadow is made in its own committed transaction and dropped afterwards."""
    if request.param == "live":
        with engine.connect() as conn, conn.begin() as transaction:
            yield Store(conn, LIVE)
            transaction.rollback()
        return
    name = temporary_name("minruntime_test_store")
    with engine.begin() as setup:
        shadow = create_shadow(setup, name)
    try:
        with engine.connect() as conn, conn.begin() as transaction:
            yield Store(conn, state_tables(shadow.state_schema))
            live = [
                conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one()
                for table in metadata.sorted_tables
                if table.name != "queue_tree_version"
            ]
            assert live == [0] * len(live), "a shadow's store wrote the live tables"
            transaction.rollback()
    finally:
        with engine.begin() as cleanup:
            drop_shadow(cleanup, name)


def test_state_tables_are_built_once_per_schema_and_refuse_bad_names() -> None:
    assert state_tables("minruntime_state") is LIVE
    assert state_tables("somewhere_state").outbox.fullname == "somewhere_state.outbox"
    assert (
        LIVE.sql("SELECT 1 FROM minruntime_state.outbox") == "SELECT 1 FROM minruntime_state.outbox"
    )
    with pytest.raises(SchemaNameError, match="reserved"):
        state_tables("public")
    with pytest.raises(SchemaNameError, match="lower-case"):
        state_tables("x; DROP TABLE y")


def _message(topic: str = "out") -> outbox.OutboxMessage:
    row_id = uuid.uuid4()
    return outbox.OutboxMessage(row_id, topic, b"k", b"{}", {"id": str(row_id)})


def test_the_outbox_keeps_the_first_row_of_an_id_and_relays_it_once(store: Store) -> None:
    first, second = _message(), _message()
    written = outbox.enqueue(store.conn, store.tables, [first, second])
    assert written == {str(first.id), str(second.id)}
    assert outbox.enqueue(store.conn, store.tables, [first]) == set()
    claimed = outbox.claim(store.conn, store.tables, 10)
    assert {row.id for row in claimed} == written
    outbox.mark_published(store.conn, store.tables, [str(first.id)])
    outbox.record_failures(store.conn, store.tables, [(str(second.id), "too large")], [])
    assert outbox.claim(store.conn, store.tables, 10) == []
    stats = outbox.outbox_stats(store.conn, store.tables)
    assert (stats.backlog, stats.set_aside) == (0, 1)
    assert outbox.retry_set_aside(store.conn, store.tables) == 1
    assert [row.id for row in outbox.claim(store.conn, store.tables, 10)] == [str(second.id)]


def _logged(event_id: str, payload: str, offset: int | None = 0) -> dict[str, object]:
    return {
        "topic": "kai.queues",
        "partition": None if offset is None else 0,
        "offset": offset,
        "event_id": event_id,
        "source": "test",
        "type": "queue.upserted",
        "subject": "q",
        "event_time": T0,
        "payload": payload,
    }


def test_the_event_log_appends_and_recognises_ids_and_changed_content(store: Store) -> None:
    event_log.append(
        store.conn, store.tables, [_logged("a", '{"x": 1}'), _logged("b", "{}", offset=None)]
    )
    seen = event_log.logged_ids(store.conn, store.tables, {("test", "a"), ("test", "c")})
    assert seen == {("test", "a")}
    again = [(0, "test", "a", '{ "x" : 1 }'), (1, "test", "a", '{"x": 2}')]
    assert event_log.conflicting(store.conn, store.tables, again) == {1: "kai.queues/0@0"}
    assert store.count("event_log") == 2


def test_a_dead_letter_is_written_once(store: Store) -> None:
    letter = {
        "topic": "kai.queues",
        "partition": 0,
        "offset": 7,
        "key": b"k",
        "value": b"\xff",
        "key_text": "k",
        "value_text": None,
        "kind": "not_json",
        "message": "bad",
        "at": T0,
    }
    record_dead_letters(store.conn, store.tables, [letter])
    record_dead_letters(store.conn, store.tables, [letter])
    assert store.count("dead_letter_log") == 1
    later = {**letter, "offset": 9, "kind": "invalid", "message": "worse"}
    record_dead_letters(store.conn, store.tables, [later])
    assert first_dead_letter(store.conn, store.tables, "kai.queues", 0) == (7, "not_json", "bad")
    assert first_dead_letter(store.conn, store.tables, "kai.queues", 8) == (9, "invalid", "worse")
    assert first_dead_letter(store.conn, store.tables, "kai.queues", 10) is None
    assert first_dead_letter(store.conn, store.tables, "kai.nodes", 0) is None


def test_offsets_lock_store_rebaseline_and_rewind(store: Store) -> None:
    where = [("kai.queues", 0), ("kai.queues", 1)]
    locked = offsets.lock_offsets(store.conn, store.tables, GROUP, where, None)
    assert locked == {("kai.queues", 0): 0, ("kai.queues", 1): 0}
    offsets.store_offsets(store.conn, store.tables, GROUP, {("kai.queues", 0): 5})
    life = TopicLife("id-1", {0: 9, 1: 9})
    assert offsets.lock_offsets(store.conn, store.tables, GROUP, where, {"kai.queues": life}) == {
        ("kai.queues", 0): 5,
        ("kai.queues", 1): 0,
    }
    assert offsets.stored_offsets(store.conn, store.tables, GROUP) == {
        "kai.queues": [StoredOffset(0, 5, "id-1"), StoredOffset(1, 0, "id-1")]
    }
    other = TopicLife("id-2", {0: 9, 1: 9})
    with pytest.raises(TopicLifeChangedError):
        offsets.lock_offsets(store.conn, store.tables, GROUP, where, {"kai.queues": other})
    offsets.rebaseline(store.conn, store.tables, GROUP, "kai.queues", "id-2", {0: 3})
    assert offsets.lock_topic(store.conn, store.tables, GROUP, "kai.queues") == [
        StoredOffset(0, 3, "id-2")
    ]
    offsets.rewind_to(store.conn, store.tables, GROUP, {("kai.queues", 0): 1})
    assert offsets.lock_topic(store.conn, store.tables, GROUP, "kai.queues")[0].next_offset == 1


def test_node_pools_and_nodes_are_written_and_loaded(store: Store) -> None:
    config = {
        "node_pool": "default",
        "preempt": timedelta(minutes=5),
        "reclaim": timedelta(0),
        "method": "queue",
        "delay": timedelta(minutes=1),
        "max_requeues": 3,
        "max_requeues_window": timedelta(hours=1),
        # The disruption budget and the eviction gap (migration 0021): unset.
        "max_evictions": None,
        "eviction_window": None,
        "min_eviction_gap": None,
    }
    node_pools.upsert_configs(store.conn, store.tables, [config])
    node_pools.write_nodes(
        store.conn,
        store.tables,
        {"n1": {"name": "n1", "pool": "default", "gpu": 8}, "n2": None},
    )
    configs, bad = node_pools.read_node_pool_configs(store.conn, store.tables)
    assert configs.by_pool["default"] == MinRuntimeConfig(
        default_preempt_min_runtime=timedelta(minutes=5),
        reclaim_resolve_method="queue",
        default_requeue_delay=timedelta(minutes=1),
        max_requeues=3,
        max_requeues_window=timedelta(hours=1),
    )
    assert bad == set()
    node_pools.write_nodes(store.conn, store.tables, {"n1": None})
    assert store.count("node_state") == 0


def test_the_queue_tree_is_written_and_loaded(store: Store) -> None:
    tree = QueueTree(
        [
            Queue(name="root", preempt_min_runtime=timedelta(minutes=1)),
            Queue(name="a", parent="root"),
        ]
    )
    rows, pool_rows = resolved_rows(tree)
    before = queues.stored_tree(store.conn, store.tables, lock=True)
    assert len(before.tree) == 0
    queues.write_tree(store.conn, store.tables, before, tree, rows, pool_rows)
    store.conn.info.clear()  # read from the tables, not this connection's cache
    loaded = queues.load_tree(store.conn, store.tables)
    assert {q.name: q.parent for q in loaded} == {"root": None, "a": "root"}
    assert queues.stored_tree(store.conn, store.tables).rows == rows


def test_decisions_and_the_requeue_reads(store: Store) -> None:
    conn, tables = store.conn, store.tables
    conn.execute(
        sa.insert(tables.podgroup_state),
        [
            {
                "uid": "v",
                "queue": "q",
                "priority": 1,
                "status": "running",
                "start_time": T0,
                "submitted": True,
            },
            {
                "uid": "b",
                "queue": "q",
                "priority": 9,
                "status": "pending",
                "start_time": None,
                "submitted": True,
            },
        ],
    )
    conn.execute(
        sa.insert(tables.nominations), {"uid": "v", "nominated_by": "x", "nominated_at": T0}
    )
    decision = {
        "decision_id": "d1",
        "uid": "v",
        "decided_at": T0,
        "outcome": "committed",
        "nominated_by": ["x"],
        "beneficiaries": ["b"],
        "run_start": T0,
        "requeue_not_before": T0 + timedelta(hours=1),
        "placements": [],
        "reason": None,
        "delay_problem": None,
    }
    decisions.insert_decisions(conn, tables, [decision])
    assert decisions.recorded_decision_ids(conn, tables, ["d1", "d2"]) == {"d1"}
    decisions.consume_nominations(conn, tables, [{"uid": "v", "by": ["x"]}])
    decisions.commit_cooldowns(
        conn,
        tables,
        [
            {
                "uid": "v",
                "key": "k",
                "value": "v",
                "not_before": T0 + timedelta(hours=1),
                "run_start": T0,
            }
        ],
    )
    decisions.insert_promises(
        conn,
        tables,
        [
            {
                "decision_id": "d1",
                "beneficiary": "b",
                "node": "n1",
                "victim": "v",
                "gpu": 2,
                "expires_at": T0 + timedelta(hours=1),
            }
        ],
    )
    rows = requeue.read_cycle_rows(conn, tables, T0)
    assert [row[0] for row in rows.podgroups] == ["b", "v"]
    assert rows.nominations == []
    assert [(b, n, float(g)) for b, n, g in rows.promises] == [("b", "n1", 2.0)]
    assert [row[:2] for row in requeue.last_decision_rows(conn, tables, ["v", "b"])] == [
        ("v", "committed")
    ]
    requeue.lock_podgroups(conn, tables, ["v"])
    ending = requeue.runs_ending_rows(
        conn, tables, [timedelta(minutes=30)], T0, T0 + timedelta(hours=1)
    )
    assert [row[0] for row in ending] == ["v"]
    awaiting = conn.execute(
        sa.select(tables.podgroup_state.c.awaiting_release).where(
            tables.podgroup_state.c.uid == "v"
        )
    ).scalar_one()
    assert awaiting is True


def _submission(
    pods: tuple[tuple[str, str, float], ...],
    *,
    subgroups: tuple[SubGroup, ...] = (SubGroup("w", 1),),
    preemptibility: Preemptibility = Preemptibility.PREEMPTIBLE,
    annotations: dict[str, str] | None = None,
    at: datetime = T0,
) -> Submission:
    """A submission of job ``ns/job`` to queue ``q`` (priority 3)."""
    return Submission(
        name="job",
        namespace="ns",
        queue="q",
        node_pool=None,
        priority=3,
        preemptibility=preemptibility,
        subgroups=subgroups,
        pods=pods,
        annotations=annotations or {},
        at=at,
    )


def _write_new(store: Store, state: PodGroupState) -> None:
    """Write a podgroup that is not stored yet, with its pods and subgroups."""
    podgroups.write_podgroups(
        store.conn,
        store.tables,
        [state],
        stored={},
        pods_changed=[state],
        subgroups_changed=[state],
    )


def test_podgroups_are_written_and_loaded_back_as_the_fold_left_them(store: Store) -> None:
    conn, tables = store.conn, store.tables
    submitted = fold(
        PodGroupState("a"),
        _submission(
            (("p0", "w", 0.5), ("p1", "w", 1.0), ("l", "lead", 1.0)),
            subgroups=(SubGroup("w", 1), SubGroup("lead", 1)),
            preemptibility=Preemptibility.SEMI_PREEMPTIBLE,
            annotations={EXPECTED_RUNTIME_ANNOTATION: "1h"},
        ),
    )
    running = fold(submitted, Allocation((("p0", "n1"), ("l", "n2")), T0 + timedelta(seconds=5)))
    placeholder = fold(PodGroupState("b"), Allocation((("x", "n1"),), T0))
    podgroups.write_podgroups(
        conn,
        tables,
        [running, placeholder],
        stored={},
        pods_changed=[running, placeholder],
        subgroups_changed=[running],
    )
    loaded = podgroups.load_podgroups(conn, tables, ["b", "a", "missing", "a"])
    assert loaded.states == {"a": running, "b": placeholder}
    assert loaded.pending == frozenset()
    assert [sub.name for sub in loaded.states["a"].subgroups] == ["w", "lead"]
    row = conn.execute(
        sa.select(tables.podgroup_state).where(tables.podgroup_state.c.uid == "a")
    ).one()
    assert (row.status, row.running_pods, row.is_elastic, row.protected_evictable_pods) == (
        "running",
        2,
        True,
        0,
    )
    assert (row.expected_runtime, row.submitted, row.awaiting_release) == (
        timedelta(hours=1),
        True,
        False,
    )
    # Semi-preemptible: stored as such, and its flag says some of its pods may go (0014).
    assert (row.preemptibility, row.preemptible) == ("semi-preemptible", True)
    # The pods of a state not named as changed stay as they were.
    released = fold(running, Release(None, T0 + timedelta(seconds=9)))
    stored = podgroups.load_podgroups(conn, tables, ["a"]).states
    podgroups.write_podgroups(conn, tables, [released], stored=stored)
    assert podgroups.load_podgroups(conn, tables, ["a"]).states["a"].run.allocated == {"p0", "l"}
    podgroups.write_podgroups(conn, tables, [released], stored=stored, pods_changed=[released])
    assert podgroups.load_podgroups(conn, tables, ["a"]).states["a"] == released
    assert podgroups.load_podgroups(conn, tables, []).states == {}


def test_every_value_reaches_its_column_exactly_through_the_json_arrays(store: Store) -> None:
    # Upserts and in-place updates send each column as one JSON array, cast from text in
    # PostgreSQL: quotes, backslashes and non-ASCII text, microseconds, a fractional duration,
    # decimal gpus and nested annotations come back exactly.
    conn, tables = store.conn, store.tables
    odd = 'q"\\ü,{x}'
    at = T0 + timedelta(microseconds=7)
    submitted = fold(
        PodGroupState(odd),
        _submission(
            ((odd, "w", 0.25), ("p1", "w", 2.5)),
            annotations={EXPECTED_RUNTIME_ANNOTATION: "1.5s", "note": odd},
            at=at,
        ),
    )
    running = fold(submitted, Allocation(((odd, odd),), at + timedelta(microseconds=1)))
    _write_new(store, submitted)
    stored = podgroups.load_podgroups(conn, tables, [odd]).states
    podgroups.write_podgroups(conn, tables, [running], stored=stored, pods_changed=[running])
    assert podgroups.load_podgroups(conn, tables, [odd]).states == {odd: running}
    row = conn.execute(
        sa.select(tables.podgroup_state).where(tables.podgroup_state.c.uid == odd)
    ).one()
    assert (row.expected_runtime, row.start_time, row.submitted_at) == (
        timedelta(seconds=1.5),
        at + timedelta(microseconds=1),
        at,
    )
    assert row.annotations == {EXPECTED_RUNTIME_ANNOTATION: "1.5s", "note": odd}
    pods = conn.execute(
        sa.select(tables.pod_state.c.name, tables.pod_state.c.gpu, tables.pod_state.c.node)
        .where(tables.pod_state.c.uid == odd)
        .order_by(tables.pod_state.c.name)
    ).all()
    assert [tuple(pod) for pod in pods] == sorted(
        [(odd, Decimal("0.25"), odd), ("p1", Decimal("2.5"), None)]
    )


def test_only_the_pod_rows_that_changed_are_written(store: Store) -> None:
    conn, tables = store.conn, store.tables
    submitted = fold(
        PodGroupState("a"),
        _submission((("p0", "w", 0.5), ("p1", "w", 1.0), ("p2", "w", 2.0))),
    )
    _write_new(store, submitted)

    def versions() -> dict[str, str]:
        # xmin: the transaction that wrote the row version (a savepoint per write below).
        rows = conn.execute(
            sa.text(f"SELECT name, xmin::text FROM {tables.pod_state.fullname} WHERE uid = 'a'")
        )
        return {row.name: row.xmin for row in rows}

    def write(state: PodGroupState) -> None:
        stored = podgroups.load_podgroups(conn, tables, ["a"]).states
        with conn.begin_nested():
            podgroups.write_podgroups(conn, tables, [state], stored=stored, pods_changed=[state])
        assert podgroups.load_podgroups(conn, tables, ["a"]).states["a"] == state

    first = versions()
    allocated = fold(submitted, Allocation((("p1", "n1"),), T0 + timedelta(seconds=1)))
    write(allocated)
    after_allocation = versions()
    assert after_allocation["p1"] != first["p1"]  # updated in place
    assert {after_allocation["p0"], after_allocation["p2"]} == {first["p0"], first["p2"]}
    # A resubmission that drops p2, adds p3 and keeps the rest as they are.
    resubmitted = fold(
        allocated,
        _submission(
            (("p0", "w", 0.5), ("p1", "w", 1.0), ("p3", "w", 1.0)), at=T0 + timedelta(seconds=2)
        ),
    )
    write(resubmitted)
    after_resubmission = versions()
    assert set(after_resubmission) == {"p0", "p1", "p3"}
    assert after_resubmission["p0"] == first["p0"]
    assert after_resubmission["p1"] == after_allocation["p1"]
    row = conn.execute(
        sa.select(tables.pod_state).where(
            tables.pod_state.c.uid == "a", tables.pod_state.c.name == "p1"
        )
    ).one()
    assert (row.node, row.allocated, row.gpu) == ("n1", True, 1)


def test_a_pod_with_a_gpu_float_cannot_hold_exactly_is_not_rewritten(store: Store) -> None:
    # 0.1 is stored as numeric 0.1 and loaded as Decimal("0.1"), which is not the float 0.1:
    # still the same row.
    conn, tables = store.conn, store.tables
    submitted = fold(PodGroupState("a"), _submission((("p0", "w", 0.1), ("p1", "w", 0.1))))
    _write_new(store, submitted)
    version = f"SELECT name, xmin::text FROM {tables.pod_state.fullname} WHERE uid = 'a'"
    first = {row.name: row.xmin for row in conn.execute(sa.text(version))}
    stored = podgroups.load_podgroups(conn, tables, ["a"]).states
    allocated = fold(submitted, Allocation((("p1", "n1"),), T0 + timedelta(seconds=1)))
    with conn.begin_nested():
        podgroups.write_podgroups(
            conn, tables, [allocated], stored=stored, pods_changed=[allocated]
        )
    after = {row.name: row.xmin for row in conn.execute(sa.text(version))}
    assert after["p0"] == first["p0"]
    assert after["p1"] != first["p1"]


def test_a_podgroup_leaving_pending_drops_its_promises_and_nominations_keep_the_latest(
    store: Store,
) -> None:
    conn, tables = store.conn, store.tables
    podgroups.write_podgroups(
        conn, tables, [PodGroupState("b")], stored={}, pods_changed=[PodGroupState("b")]
    )
    assert podgroups.load_podgroups(conn, tables, ["b"]).pending == {"b"}
    promise = {
        "decision_id": "d1",
        "beneficiary": "b",
        "node": "n1",
        "victim": "v",
        "gpu": 1,
        "expires_at": T0 + timedelta(hours=1),
    }
    decisions.insert_promises(conn, tables, [promise])
    podgroups.write_podgroups(conn, tables, [PodGroupState("b")], stored={}, left_pending=["b"])
    assert store.count("requeue_promises") == 0
    for reason, at in (("first", T0), ("second", T0 + timedelta(seconds=1))):
        podgroups.write_nominations(
            conn,
            tables,
            [{"uid": "b", "nominated_by": "x", "reason": reason, "nominated_at": at}],
        )
    assert conn.execute(sa.select(tables.nominations.c.reason)).scalars().all() == ["second"]
