"""`minruntime checkpoint ack`'s input checks and `explain`'s checkpoint line, without a
cluster or a database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from minruntime.audit.explain_model import CheckpointHandshake, handshake_facts, handshake_text
from minruntime.cluster.checkpoint_ack import (
    CheckpointAckError,
    checkpoint_time,
    podgroup_target,
)
from minruntime.core.checkpoint import (
    CHECKPOINT_GRACE_ANNOTATION,
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
)

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def test_a_podgroup_is_named_namespace_slash_name() -> None:
    assert podgroup_target("team-a/train-7") == ("team-a", "train-7")
    assert podgroup_target(" team-a/train.7 ") == ("team-a", "train.7")
    for bad in (
        "train-7",
        "/x",
        "ns/",
        "Team/x",
        "ns/x y",
        "a/b/c",
        "n" * 64 + "/x",
        "ns/" + "x" * 254,
    ):
        with pytest.raises(CheckpointAckError, match="use NAMESPACE/NAME"):
            podgroup_target(bad)


def test_the_time_is_now_or_an_rfc3339_instant_not_in_the_future() -> None:
    assert checkpoint_time(None, NOW) == NOW
    assert checkpoint_time("2026-11-29T09:59:00Z", NOW) == NOW - timedelta(minutes=1)
    with pytest.raises(CheckpointAckError, match="is in the future"):
        checkpoint_time("2026-11-29T10:00:01Z", NOW)
    with pytest.raises(CheckpointAckError, match="not an RFC3339 time"):
        checkpoint_time("yesterday", NOW)


def test_explain_shows_the_wait_then_how_it_ended() -> None:
    asked = NOW - timedelta(seconds=30)
    pending = {
        CHECKPOINT_REQUESTED_AT_ANNOTATION: "2026-11-29T09:59:30Z",
        CHECKPOINT_GRACE_ANNOTATION: "5m",
    }
    waiting = handshake_facts(pending, None, NOW)
    assert waiting == CheckpointHandshake(asked, timedelta(minutes=5))
    assert handshake_text(waiting) == (
        "waiting since 2026-11-29T09:59:30Z for the workload's checkpointed-at"
        " (grace 5m: evicted by 2026-11-29T10:04:30Z at the latest)"
    )
    row = SimpleNamespace(
        outcome="timed_out",
        requested_at=asked,
        grace=timedelta(minutes=5),
        ended_at=asked + timedelta(minutes=5),
        checkpointed_at=None,
    )
    later = NOW + timedelta(minutes=10)
    ended = handshake_facts(pending, row, later)
    assert ended is not None
    assert ended.outcome == "timed_out"
    assert handshake_text(ended).startswith("timed out after the grace (5m)")
    assert handshake_facts(pending, row, NOW) == waiting  # as of an instant inside the wait
    # A newer request than the stored handshake: a new wait.
    newer = {CHECKPOINT_REQUESTED_AT_ANNOTATION: "2026-11-29T10:09:00Z"}
    again = handshake_facts(newer, row, later)
    assert again is not None
    assert again.outcome is None
    assert handshake_facts({}, None, NOW) is None
