"""Stored offsets tied to a topic's life, in the batch's own transaction (real PostgreSQL)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from minruntime.core.topic_life import TopicLife
from minruntime.errors import TopicLifeChangedError
from minruntime.store.offsets import lock_topic, rebaseline
from minruntime.store.schema import LIVE
from tests.cloudevents import queue
from tests.integration.helpers import GROUP, Feed, rows, scalar

OLD, NEW = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
TOPIC = "kai.queues"
OFFSETS = (
    "SELECT partition, next_offset, topic_id FROM minruntime_state.consumer_offsets"
    " WHERE consumer_group = :g AND topic = 'kai.queues' ORDER BY partition"
)


def _apply(feed: Feed, *names: str, life: TopicLife) -> int:
    records = feed.records(*(queue(name) for name in names))
    return feed.apply(records, topic_lives={TOPIC: life}).applied


def test_new_offsets_are_tied_to_the_topic_id_they_were_read_under(engine: sa.Engine) -> None:
    assert _apply(Feed(engine), "a", "b", life=TopicLife(OLD, {0: 2})) == 2
    assert rows(engine, OFFSETS, g=GROUP) == [(0, 2, OLD)]


def test_a_batch_of_another_life_stores_nothing_and_names_the_topic(engine: sa.Engine) -> None:
    _apply(Feed(engine), "a", "b", life=TopicLife(OLD))
    second = Feed(engine)  # the recreated topic numbers its records from 0 again
    with pytest.raises(TopicLifeChangedError) as refused:
        _apply(second, "c", life=TopicLife(NEW))
    assert refused.value.topic == TOPIC
    assert rows(engine, OFFSETS, g=GROUP) == [(0, 2, OLD)]
    assert scalar(engine, "SELECT count(*) FROM minruntime.queues WHERE name = 'c'") == 0

    with engine.begin() as conn:
        assert [row.topic_id for row in lock_topic(conn, LIVE, GROUP, TOPIC)] == [OLD]
        rebaseline(conn, LIVE, GROUP, TOPIC, NEW, {0: 0})
    second.offsets.clear()
    assert _apply(second, "c", life=TopicLife(NEW)) == 1
    assert rows(engine, OFFSETS, g=GROUP) == [(0, 1, NEW)]


def test_rows_stored_before_ids_were_kept_are_tied_on_the_next_batch(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(queue("a"))  # no topic_lives: the rows carry no ID, as before migration 0007
    assert rows(engine, OFFSETS, g=GROUP) == [(0, 1, None)]
    assert _apply(feed, "b", life=TopicLife(OLD)) == 1
    assert rows(engine, OFFSETS, g=GROUP) == [(0, 2, OLD)]


def test_a_log_shorter_than_the_applied_offsets_is_refused(engine: sa.Engine) -> None:
    _apply(Feed(engine), "a", "b", "c", life=TopicLife(OLD))
    with pytest.raises(TopicLifeChangedError, match="ends at offset 1"):
        _apply(Feed(engine), "x", life=TopicLife(OLD, {0: 1}))
