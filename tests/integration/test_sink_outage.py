"""The batch sink rides out a database outage longer than any retry budget (issue 12, part 5).

Before, a batch was retried 8 times (~22 s) and the processor then exited 75; nothing
restarted it. Now a transient storage error is retried for as long as it lasts, the backoff
is capped at 10 s, readiness reports the wait, and the batch applies once PostgreSQL is back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from minruntime.ingest import BatchOutcome, InboundRecord
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.requeue import lock_podgroups
from minruntime.store.schema import LIVE
from minruntime.stream.sink import BatchSink
from minruntime.topic_admin import input_topic_roles
from tests.cloudevents import allocated, annotated, queue, submitted
from tests.integration.helpers import GROUP, Feed, rows


class SwitchableEngine:
    """An engine that is away (a port nobody listens on) until switched to the real one."""

    def __init__(self, live: sa.Engine) -> None:
        self.live = live
        self.current = engine_from("postgresql://minruntime:x@127.0.0.1:1/away")

    def begin(self) -> Any:
        return self.current.begin()


def test_a_batch_waits_out_an_outage_longer_than_any_retry_budget(engine: sa.Engine) -> None:
    settings = Settings()
    switchable = SwitchableEngine(engine)
    sleeps: list[float] = []
    reasons: list[str | None] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        reasons.append(sink.storing())
        if len(sleeps) == 20:  # far past the old 8 attempts: PostgreSQL comes back
            switchable.current = switchable.live

    sink = BatchSink(
        switchable,  # type: ignore[arg-type]
        consumer_group="sink-outage",
        topic_roles=input_topic_roles(settings),
        dead_letter_topic=settings.topic_dead_letter,
        sleep=sleep,
    )
    outcome = sink(Feed(engine).records(queue("after-the-outage")))

    assert outcome.applied == 1
    assert rows(engine, "SELECT name FROM minruntime.queues") == [("after-the-outage",)]
    assert len(sleeps) == 20
    assert sleeps[:7] == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10.0]
    assert set(sleeps[6:]) == {10.0}
    assert all(reason is not None and "batch of 1 records" in reason for reason in reasons)
    assert sink.storing() is None


class HeldRows:
    """The processor's sink (lock waits of 100 ms) applying a batch while another transaction
    holds rows it needs: that transaction commits on the batch's third retry."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.sleeps: list[float] = []
        self.reasons: list[str | None] = []
        self.released = threading.Event()
        impatient = engine.execution_options()

        @sa.event.listens_for(impatient, "begin")
        def _short_lock_waits(conn: sa.Connection) -> None:
            conn.exec_driver_sql("SET LOCAL lock_timeout = '100ms'")

        settings = Settings()
        self.sink = BatchSink(
            impatient,
            consumer_group=GROUP,
            topic_roles=input_topic_roles(settings),
            dead_letter_topic=settings.topic_dead_letter,
            sleep=self._sleep,
        )

    def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.reasons.append(self.sink.storing())
        if len(self.sleeps) == 3:
            self.released.set()  # the holder commits: the rows are free
        time.sleep(0.05)

    def apply(
        self, records: list[InboundRecord], hold: Callable[[sa.Connection], object]
    ) -> list[BatchOutcome]:
        """``records`` applied while ``hold`` (run in the other transaction) holds rows."""
        outcome: list[BatchOutcome] = []
        with self.engine.connect() as holder, holder.begin():
            hold(holder)
            applying = threading.Thread(target=lambda: outcome.append(self.sink(records)))
            applying.start()
            assert self.released.wait(30), "the batch never retried"
        applying.join(30)
        assert len(self.sleeps) >= 3
        assert all(reason is not None and "lock timeout" in reason for reason in self.reasons)
        assert self.sink.storing() is None
        return outcome


def test_a_driver_level_error_mid_batch_is_waited_out_too(engine: sa.Engine, feed: Feed) -> None:
    """The store's hot statements run on psycopg's cursor, whose errors SQLAlchemy does not
    wrap: a lock timeout while the batch loads its podgroups (the worker holds the row) is
    transient like any other, and the batch is applied once the row is free."""
    feed.send(submitted("x", "q", pods=1), allocated("x", 1))
    records = feed.records(annotated("x", {"team": "a"}))
    # As a requeue cycle holds its victims.
    outcome = HeldRows(engine).apply(records, lambda worker: lock_podgroups(worker, LIVE, ["x"]))
    assert [o.applied for o in outcome] == [1]
    assert rows(engine, "SELECT annotations FROM minruntime_state.podgroup_state") == [
        ({"team": "a"},)
    ]


def test_a_lock_timeout_at_the_podgroup_writes_pipeline_end_is_waited_out_too(
    engine: sa.Engine, feed: Feed
) -> None:
    """The podgroup writes run in psycopg's pipeline mode (``store.engine.pipelined``): a
    statement's error is raised where the pipeline is synced, at the block's end. A pod update
    that waits too long for a row another transaction holds is a LockNotAvailable there, as
    it was before: transient, retried (never dead-lettered), applied once the row is free."""
    feed.send(submitted("x", "q", pods=1))
    records = feed.records(allocated("x", 1, node="n1"))
    # The podgroup's row is free (the batch locks it when it loads it); its pod's is not.
    pod_row = sa.text("SELECT 1 FROM minruntime_state.pod_state WHERE uid = 'x' FOR UPDATE")
    outcome = HeldRows(engine).apply(records, lambda other: other.execute(pod_row))
    assert [(o.applied, o.dead_lettered) for o in outcome] == [(1, 0)]
    assert rows(engine, "SELECT node FROM minruntime_state.pod_state") == [("n1",)]
    assert rows(engine, "SELECT count(*) FROM minruntime.dead_letters") == [(0,)]
