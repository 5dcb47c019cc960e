"""A pod's row is updated in place (a HOT update: no new index entry), on the real database.

The pods of a submission are COPYed into ``pod_state``; allocating or releasing a pod later
updates its row (node, allocated). With pages filled to the brim every such update moved the
row to another page and added an entry to the table's primary key (index maintenance, WAL,
dead index entries); the table's fillfactor (migration 0025) leaves room in each page.
"""

from __future__ import annotations

import sqlalchemy as sa

from minruntime.ingest import apply_batch
from tests.cloudevents import T0, allocated, submitted
from tests.integration.helpers import GROUP, Feed

PODGROUPS = 100
PODS = 4


def test_a_pod_allocated_after_its_submission_is_updated_in_place(
    engine: sa.Engine, feed: Feed
) -> None:
    uids = [f"hot-{i:03d}" for i in range(PODGROUPS)]
    # Several full pages of pod rows, written as a batch writes them (one COPY).
    feed.send(*(submitted(uid, "q", pods=PODS) for uid in uids))
    # A fifth of the podgroups, spread over those pages, then allocated in one batch.
    chosen = uids[::5]
    with engine.begin() as conn:
        outcome = apply_batch(
            conn,
            feed.records(*(allocated(uid, PODS, time=T0) for uid in chosen)),
            consumer_group=GROUP,
        )
        # This transaction's own counts (pg_stat_xact_*: not the collector's delayed view).
        ((updated, in_place),) = conn.execute(
            sa.text(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables"
                " WHERE schemaname = 'minruntime_state' AND relname = 'pod_state'"
            )
        ).all()
    assert outcome.applied == len(chosen)
    assert updated == len(chosen) * PODS
    assert in_place == updated
