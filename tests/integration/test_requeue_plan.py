"""`requeue plan`, the dry-run, against the real projections: it decides what the worker's next
cycle decides, writes nothing and takes no lock.

Events go in through ``apply_batch`` (as the processor applies them); the worker's cycles run
with ``run_cycle`` as the runtime role, as in ``test_requeue_cycle.py``; the dry-run is the
command's own ``dry_run`` (live, or as of T through a rolled-back shadow).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.commands.requeue_plan import dry_run
from minruntime.errors import UserError
from minruntime.requeue import LEADER_LOCK_KEY, CycleReport, RequeuePreview
from minruntime.requeue.preview import UnknownNodePoolError
from minruntime.store import engine_from
from minruntime.store.queues import TREE_LOCK_KEY
from minruntime.store.snapshots import SNAPSHOT_LOCK_KEY
from minruntime.store.tables import STATE_SCHEMA, metadata
from minruntime.store.unit import Units
from tests.cloudevents import allocated, node, nominated, queue, submitted
from tests.integration.helpers import OVERRUN, Feed, cycle


def story(feed: Feed) -> None:
    """Two node pools; every kind of decision the planner makes on one cycle.

    default: ``v`` over-runs on node-1 and ``hi`` (higher priority) needs its GPUs → commit;
    ``idle`` runs on node-4 without an expected runtime (not nominated: ``invalid_duration``).
    pool-b: ``u`` over-runs but its queue protects it for ten years against ``hi2`` of the same
    queue → rolled back, ``protected``; ``w`` over-runs with nobody waiting above it →
    rolled back, ``no_higher_priority_pending``.
    ``ghost``: nominated by another component, never submitted → skipped, ``not_running``.
    """
    feed.send(
        queue("team"),
        queue("guarded", preempt="3650d"),
        node("node-1", gpu=8),
        node("node-4", gpu=2),
        node("node-2", gpu=4, node_pool="pool-b"),
        node("node-3", gpu=2, node_pool="pool-b"),
        submitted("v", "team", 6, priority=50, annotations=OVERRUN),
        allocated("v", 6),
        submitted("idle", "team", 2, priority=10),
        allocated("idle", 2, node="node-4"),
        submitted(
            "hi", "team", 8, priority=100, sub_groups=[{"name": "default", "minAvailable": 8}]
        ),
        submitted("u", "guarded", 4, node_pool="pool-b", priority=50, annotations=OVERRUN),
        allocated("u", 4, node="node-2"),
        submitted(
            "hi2",
            "guarded",
            4,
            node_pool="pool-b",
            priority=100,
            sub_groups=[{"name": "default", "minAvailable": 4}],
        ),
        submitted("w", "team", 2, node_pool="pool-b", priority=200, annotations=OVERRUN),
        allocated("w", 2, node="node-3"),
        nominated("ghost", "proportion"),
        nominated("u", "proportion"),
    )


def outcomes(plan: RequeuePreview) -> list[tuple[str, str, str | None, tuple[str, ...]]]:
    return [
        (d.uid, d.outcome.value, None if d.reason is None else d.reason.value, d.beneficiaries)
        for d in plan.decisions
    ]


def assert_same_as_worker(plan: RequeuePreview, report: CycleReport) -> None:
    """Every field of every decision, the nominations, and what would be recorded."""
    assert plan.decisions == report.plan.decisions
    assert dict(plan.candidates) == dict(report.candidates)
    assert dict(plan.overruns) == dict(report.nominations.overruns)
    assert dict(plan.skipped) == dict(report.nominations.skipped)
    assert {d.uid for d in plan.decisions if plan.recorded(d)} == {
        event.subject for event in report.recorded
    }
    assert len(plan.repeated) == report.repeats


def test_the_dry_run_decides_what_the_workers_next_cycle_decides(
    engine: sa.Engine, runtime: sa.Engine, feed: Feed
) -> None:
    story(feed)
    first = datetime.now(UTC)

    live = dry_run(Units(engine), at=None, now=first)
    report = cycle(runtime, first)
    # As of `first`: the state before the worker's commit, planned at `first`.
    as_of = dry_run(Units(engine), at=first, now=datetime.now(UTC))

    # The worker's order: lowest priority first, then the least work at risk, then the
    # largest overrun, then uid.
    assert outcomes(live) == [
        ("u", "rolled_back", "protected", ()),
        ("v", "committed", None, ("hi",)),
        ("w", "rolled_back", "no_higher_priority_pending", ()),
        ("ghost", "skipped", "not_running", ()),
    ]
    assert dict(live.skipped) == {"idle": "invalid_duration"}
    (commit,) = [d for d in live.decisions if d.requeue_not_before is not None]
    assert commit.requeue_not_before == first + timedelta(minutes=5)  # the cooldown it writes
    assert {(p.pod, p.node) for p in commit.placements} == {(f"hi-{i}", "node-1") for i in range(8)}
    assert_same_as_worker(live, report)
    assert_same_as_worker(as_of, report)

    # The next cycle: v is in its cooldown (not nominated), the rollbacks repeat.
    second = first + timedelta(seconds=10)
    live = dry_run(Units(engine), at=None, now=second)
    report = cycle(runtime, second)
    assert outcomes(live) == [
        ("u", "rolled_back", "protected", ()),
        ("w", "rolled_back", "no_higher_priority_pending", ()),
    ]
    assert dict(live.skipped) == {"idle": "invalid_duration", "v": "cooldown"}
    assert live.repeated == {"u", "w"}
    assert_same_as_worker(live, report)


def test_one_node_pool_is_what_the_worker_decides_for_that_pool(
    engine: sa.Engine, runtime: sa.Engine, feed: Feed
) -> None:
    story(feed)
    now = datetime.now(UTC)

    pool_b = dry_run(Units(engine), at=None, now=now, node_pool="pool-b")
    default = dry_run(Units(engine), at=None, now=now, node_pool="default")
    report = cycle(runtime, now)

    assert pool_b.decisions == tuple(d for d in report.plan.decisions if d.uid in {"u", "w"})
    assert default.decisions == tuple(d for d in report.plan.decisions if d.uid == "v")
    # A nominated podgroup that is neither running nor pending has no pool: only in "all".
    assert "ghost" not in {d.uid for d in (*pool_b.decisions, *default.decisions)}
    assert (dict(default.skipped), dict(pool_b.skipped)) == ({"idle": "invalid_duration"}, {})
    assert default.promised == {"node-1": 8.0}
    assert pool_b.promised == {}
    assert pool_b.node_pools == ("default", "pool-b")


def test_an_unknown_node_pool_is_an_error_naming_the_known_ones(
    engine: sa.Engine, feed: Feed
) -> None:
    story(feed)

    with pytest.raises(UnknownNodePoolError) as raised:
        dry_run(Units(engine), at=None, now=datetime.now(UTC), node_pool="pool-x")
    assert str(raised.value) == (
        "--node-pool 'pool-x': no node, podgroup or configuration of that node pool in the "
        "state read; known: default, pool-b"
    )
    # Before it existed, pool-b is unknown too.
    with pytest.raises(UnknownNodePoolError):
        dry_run(
            Units(engine),
            at=datetime(2020, 1, 1, tzinfo=UTC),
            now=datetime.now(UTC),
            node_pool="pool-b",
        )


def test_before_anything_happened_the_plan_is_empty(engine: sa.Engine, feed: Feed) -> None:
    story(feed)

    plan = dry_run(Units(engine), at=datetime(2020, 1, 1, tzinfo=UTC), now=datetime.now(UTC))

    assert (plan.decisions, dict(plan.candidates), plan.node_pools) == ((), {}, ("default",))


def contents(engine: sa.Engine) -> dict[str, Any]:
    """Every state table's rows, the schemas and the locks held: what a write would change."""
    state = {}
    with engine.connect() as conn:
        for table in metadata.sorted_tables:
            if table.schema == STATE_SCHEMA:
                rows = conn.execute(sa.text(f"SELECT * FROM {STATE_SCHEMA}.{table.name}"))
                state[table.name] = sorted(map(repr, rows))
        state["schemas"] = sorted(
            conn.execute(sa.text("SELECT nspname FROM pg_namespace")).scalars()
        )
    return state


def test_the_dry_run_writes_nothing(engine: sa.Engine, runtime: sa.Engine, feed: Feed) -> None:
    story(feed)
    cycle(runtime, datetime.now(UTC))
    feed.send(nominated("w", "priority"))
    before = contents(engine)

    now = datetime.now(UTC)
    for at in (None, now):
        plan = dry_run(Units(engine), at=at, now=now)
        assert plan.decisions  # it did plan: a commit, rollbacks, a skip

    assert contents(engine) == before


@contextmanager
def held_by_another_session(engine: sa.Engine) -> Iterator[None]:
    """Another session holds every lock the worker and the processor take, and more: the
    leader lock, every podgroup row FOR UPDATE, the tree and snapshot locks exclusively, and
    every state table IN EXCLUSIVE MODE (only plain reads can pass)."""
    tables = [t.name for t in metadata.sorted_tables if t.schema == STATE_SCHEMA]
    with engine.connect() as holder:
        holder.exec_driver_sql(f"SELECT pg_advisory_lock({LEADER_LOCK_KEY})")
        holder.exec_driver_sql(f"SELECT pg_advisory_xact_lock({TREE_LOCK_KEY})")
        holder.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SNAPSHOT_LOCK_KEY})")
        holder.exec_driver_sql(f"SELECT uid FROM {STATE_SCHEMA}.podgroup_state FOR UPDATE")
        holder.exec_driver_sql(
            "LOCK TABLE " + ", ".join(f"{STATE_SCHEMA}.{t}" for t in tables) + " IN EXCLUSIVE MODE"
        )
        try:
            yield
        finally:
            holder.rollback()
            holder.exec_driver_sql(f"SELECT pg_advisory_unlock({LEADER_LOCK_KEY})")


def test_the_plan_returns_while_another_session_holds_the_workers_locks(
    engine: sa.Engine, owner_database_url: str, feed: Feed
) -> None:
    story(feed)
    now = datetime.now(UTC)
    expected = dry_run(Units(engine), at=None, now=now)
    # A dry-run that waited for a lock fails after this instead of hanging the suite.
    guarded = engine_from(owner_database_url, connect_args={"options": "-c lock_timeout=30s"})
    try:
        with held_by_another_session(engine):
            live = dry_run(Units(guarded), at=None, now=now)
            as_of = dry_run(Units(guarded), at=now, now=now)
    finally:
        guarded.dispose()

    assert live.decisions == as_of.decisions == expected.decisions
    assert "committed" in {d.outcome.value for d in live.decisions}


def test_the_runtime_role_may_plan_the_live_state_and_the_reader_may_not(
    engine: sa.Engine, runtime: sa.Engine, reader: sa.Engine, feed: Feed
) -> None:
    story(feed)
    now = datetime.now(UTC)

    assert (
        dry_run(Units(runtime), at=None, now=now).decisions
        == dry_run(Units(engine), at=None, now=now).decisions
    )
    with pytest.raises(
        UserError, match=r"run it as the owner role, or without --at as the runtime"
    ):
        dry_run(Units(runtime), at=now, now=now)  # a shadow: CREATE on the database
    with pytest.raises(UserError, match=r"^permission denied for schema minruntime_state: "):
        dry_run(Units(reader), at=None, now=now)
