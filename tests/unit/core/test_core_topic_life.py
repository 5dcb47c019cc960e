"""The pure comparison of stored offsets with the life of a topic Kafka holds now."""

from __future__ import annotations

from minruntime.core.topic_life import (
    StoredOffset,
    TopicLife,
    life_changed,
    refusal_line,
    unread_gap,
    untied,
)
from minruntime.ingest.offsets import laps
from minruntime.ingest.records import InboundRecord

OLD, NEW = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"


def test_offsets_read_under_the_same_topic_id_belong_to_it() -> None:
    stored = [StoredOffset(0, 8, OLD), StoredOffset(1, 3, OLD)]
    assert life_changed("kai.queues", stored, TopicLife(OLD, {0: 8, 1: 10})) is None


def test_another_topic_id_is_another_life_whatever_the_offsets() -> None:
    reason = life_changed("kai.queues", [StoredOffset(0, 8, OLD)], TopicLife(NEW, {0: 100}))
    assert reason is not None
    assert "'kai.queues'" in reason
    assert OLD in reason
    assert NEW in reason
    assert "\n" not in reason


def test_one_partition_of_another_life_is_enough() -> None:
    stored = [StoredOffset(0, 0, NEW), StoredOffset(1, 5, OLD)]
    assert life_changed("t", stored, TopicLife(NEW)) is not None


def test_a_log_shorter_than_what_was_applied_from_it_is_another_log() -> None:
    stored = [StoredOffset(0, 3, OLD), StoredOffset(1, 8, OLD)]
    reason = life_changed("t", stored, TopicLife(OLD, {0: 3, 1: 5}))
    assert reason is not None
    assert "partition 1 ends at offset 5" in reason
    assert "offsets up to 8" in reason


def test_a_log_end_equal_to_the_next_offset_is_fine_and_unknown_ends_do_not_decide() -> None:
    stored = [StoredOffset(0, 8, OLD), StoredOffset(1, 8, OLD)]
    assert life_changed("t", stored, TopicLife(OLD, {0: 8})) is None


def test_a_topic_kafka_gives_no_id_is_refused() -> None:
    assert life_changed("t", [StoredOffset(0, 1, OLD)], TopicLife(None)) is not None


def test_rows_without_an_id_are_not_evidence_and_are_tied() -> None:
    stored = [StoredOffset(1, 5, None), StoredOffset(0, 5, None), StoredOffset(2, 1, NEW)]
    assert life_changed("t", stored, TopicLife(NEW, {0: 9, 1: 9})) is None
    assert untied(stored) == [0, 1]


def test_readiness_is_none_until_a_topic_is_refused_then_one_line_naming_them() -> None:
    assert refusal_line({}) is None
    line = refusal_line({"kai.queues": "why q", "kai.nodes": "why n"})
    assert line is not None
    assert "kai.nodes, kai.queues" in line
    assert "why n" in line
    assert "(and 1 more)" in line
    assert "\n" not in line


def _records(*where: tuple[str, int, int]) -> list[InboundRecord]:
    return [InboundRecord(t, p, o, None, b"{}") for t, p, o in where]


def test_a_replay_is_cut_where_an_offset_goes_back() -> None:
    records = _records(("q", 0, 0), ("n", 0, 7), ("q", 0, 1), ("q", 0, 0), ("n", 0, 8))
    cut = laps(records)
    assert [[r.offset for r in lap] for lap in cut] == [[0, 7, 1], [0, 8]]
    assert laps([]) == []
    assert laps(_records(("q", 0, 4), ("q", 1, 0), ("q", 0, 5))) == [
        _records(("q", 0, 4), ("q", 1, 0), ("q", 0, 5))
    ]


def test_a_held_batch_past_the_new_baseline_leaves_records_unread() -> None:
    stored = [StoredOffset(0, 0, NEW), StoredOffset(1, 4, NEW)]
    assert unread_gap("t", stored, {0: 0, 1: 2}) is None  # at or below: all read
    gap = unread_gap("t", stored, {1: 9})
    assert gap is not None
    assert "partition 1 was re-baselined to offset 4 but the consumer is at offset 9" in gap
