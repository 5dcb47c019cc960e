"""The outbox gauges read the table: pending rows, the oldest one's age, set-aside rows; retry."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

from minruntime.store.outbox import retry_set_aside
from minruntime.store.schema import LIVE
from minruntime.stream.outbox_metrics import read_outbox_stats
from tests.integration.helpers import execute


def insert(engine: sa.Engine, *, age: str, state: str = "pending") -> str:
    row_id = str(uuid.uuid4())
    published = "now()" if state == "published" else "NULL"
    failed = "now()" if state == "set_aside" else "NULL"
    execute(
        engine,
        "INSERT INTO minruntime_state.outbox (id, topic, payload, created_at,"
        f" published_at, failed_at) VALUES (:id, 't', 'x', now() - CAST(:age AS interval),"
        f" {published}, {failed})",
        id=row_id,
        age=age,
    )
    return row_id


def test_the_gauges_count_pending_rows_and_the_oldest_ones_age(engine: sa.Engine) -> None:
    assert read_outbox_stats(engine).backlog == 0
    assert read_outbox_stats(engine).oldest_age_seconds == 0
    insert(engine, age="1 hour", state="published")
    refused = insert(engine, age="2 hours", state="set_aside")
    insert(engine, age="10 minutes")
    insert(engine, age="1 minute")

    stats = read_outbox_stats(engine)

    assert (stats.backlog, stats.set_aside) == (2, 1)
    # The set-aside row is older but is not waiting: the oldest waiting one is 10 minutes old.
    assert 600 <= stats.oldest_age_seconds < 660

    with engine.begin() as conn:
        assert retry_set_aside(conn, LIVE, [refused]) == 1
        assert retry_set_aside(conn, LIVE) == 0
    stats = read_outbox_stats(engine)
    assert (stats.backlog, stats.set_aside) == (3, 0)
    assert stats.oldest_age_seconds >= 7200
