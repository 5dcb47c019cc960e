"""Two processor instances on one partition: the zombie's batch is a no-op, nothing lost.

When a consumer-group rebalance moves a partition while its old owner still has a batch of it
in flight (a "zombie": stalled past its session, then resumed), the two instances apply
overlapping batches of one partition. ``apply_batch`` locks the partition's offset row in the
batch's transaction (``store.offsets.lock_offsets``), so the second transaction waits for the
first and then skips every record the first one stored. These tests run the two transactions
on two connections against the real database, in each order.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import sqlalchemy as sa

from minruntime.ingest import BatchOutcome, InboundRecord, apply_batch
from tests.e2e.harness import wait_for
from tests.integration.helpers import GROUP, Feed, allocated, scalar, submitted

OFFSET = (
    "SELECT next_offset FROM minruntime_state.consumer_offsets"
    " WHERE consumer_group = :g AND topic = 'kai.podgroups' AND partition = 0"
)
WAITING_ON_A_LOCK = (
    "SELECT count(*) FROM pg_stat_activity"
    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


class Other:
    """The other instance: applies its batch in a thread, in a transaction of its own."""

    def __init__(self, engine: sa.Engine, records: Sequence[InboundRecord]) -> None:
        self.outcome: BatchOutcome | None = None
        self._thread = threading.Thread(target=self._run, args=(engine, records), daemon=True)
        self._thread.start()

    def _run(self, engine: sa.Engine, records: Sequence[InboundRecord]) -> None:
        with engine.begin() as conn:
            self.outcome = apply_batch(conn, records, consumer_group=GROUP)

    def result(self) -> BatchOutcome:
        self._thread.join(60)
        assert self.outcome is not None, "the other instance's batch did not finish"
        return self.outcome


def _overlapping(
    engine: sa.Engine, held: Sequence[InboundRecord], waiting: Sequence[InboundRecord]
) -> tuple[BatchOutcome, BatchOutcome]:
    """Apply ``held`` in an open transaction, start ``waiting`` on another connection, commit.

    Returns both outcomes; the second batch is seen waiting for the offsets row lock first.
    """
    with engine.connect() as conn, conn.begin() as transaction:
        first = apply_batch(conn, held, consumer_group=GROUP)
        other = Other(engine, waiting)
        wait_for(
            lambda: scalar(engine, WAITING_ON_A_LOCK) >= 1,
            10,
            "the other instance's batch to wait for the offsets row lock",
        )
        transaction.commit()
    return first, other.result()


def _lifecycles(feed: Feed, count: int) -> list[InboundRecord]:
    messages = []
    for i in range(count):
        messages += [submitted(f"u{i}", "a", 2), allocated(f"u{i}", 2)]
    return feed.records(*messages)


def _logged(engine: sa.Engine) -> list[tuple[int, int]]:
    """(offset, how many times) for every offset in the event log."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text('SELECT "offset", count(*) FROM minruntime.event_log GROUP BY 1 ORDER BY 1')
        )
        return [(row[0], row[1]) for row in rows]


def test_a_batch_in_flight_holds_the_new_owner_which_then_applies_only_what_follows(
    engine: sa.Engine,
) -> None:
    records = _lifecycles(Feed(engine), 10)  # offsets 0-19 of partition 0
    # The old owner's batch is in flight; the new owner read the partition from an older
    # Kafka commit, so its batch (5-19) overlaps.
    first, second = _overlapping(engine, records[:12], records[5:])
    assert (first.applied, first.skipped_offsets) == (12, 0)
    assert (second.applied, second.skipped_offsets, second.duplicate_ids) == (8, 7, 0)
    assert _logged(engine) == [(offset, 1) for offset in range(20)]
    assert scalar(engine, OFFSET, g=GROUP) == 20
    assert scalar(engine, "SELECT count(*) FROM minruntime.podgroups") == 10
    assert scalar(engine, "SELECT count(*) FROM minruntime.dead_letters") == 0


def test_a_zombie_batch_that_commits_last_applies_nothing_and_lowers_no_offset(
    engine: sa.Engine,
) -> None:
    feed = Feed(engine)
    records = _lifecycles(feed, 10)
    # The new owner applies the partition; the zombie resumes with the batch it fetched
    # before the rebalance and waits for the owner's transaction.
    applied, stale = _overlapping(engine, records, records[:6])
    assert applied.applied == 20
    assert (stale.applied, stale.skipped_offsets, stale.duplicate_ids) == (0, 6, 0)
    assert stale.next_offsets == {("kai.podgroups", 0): 20}
    assert _logged(engine) == [(offset, 1) for offset in range(20)]
    assert scalar(engine, OFFSET, g=GROUP) == 20
    # The partition goes on from where the owner stopped.
    more = feed.records(submitted("late", "a"))
    assert feed.apply(more).applied == 1
    assert scalar(engine, OFFSET, g=GROUP) == 21
