"""Each hostile payload of issue 12, one at a time, through the processor's BatchSink.

The e2e corpus (tests/e2e/test_hostile_records.py) runs them all against a real processor; here
each one reproduces its own finding on real PostgreSQL: before the bounds and the isolation,
the long identifiers and the NaN extension made the sink give up (StorageUnavailableError:
exit 75 and a crash loop), `[` x 10,000 raised RecursionError (exit 70), and gpu 1e308, the
year-0 timestamp and the conflicting duplicate were applied or dropped without a dead letter.
"""

from __future__ import annotations

import json
import random
import string
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.ingest import InboundRecord
from minruntime.stream.sink import BatchSink
from tests.integration.helpers import GROUP, allocated, cloud_event, node, queue, rows, submitted

ROLES = {"kai.queues": "queues", "kai.podgroups": "podgroups", "kai.nodes": "nodes"}
# Incompressible, as a real identifier would be: PostgreSQL compresses an index row before it
# checks its size, so "x" * 100,000 would fit, and hide finding 1.
LONG = "".join(random.Random(12).choices(string.ascii_letters + string.digits, k=100_000))


def _with(value: bytes, **attributes: Any) -> bytes:
    return json.dumps({**json.loads(value), **attributes}).encode()


def _extension(value: bytes, literal: str) -> bytes:
    return value.replace(b'"specversion"', f'"ext": {literal}, "specversion"'.encode(), 1)


HOSTILE: dict[str, tuple[str, bytes, str]] = {
    "queue name 100,000 characters": ("kai.queues", queue(LONG).value or b"", "too_long"),
    "podgroup uid 100,000 characters": (
        "kai.podgroups",
        submitted(LONG, "leaf").value or b"",
        "too_long",
    ),
    "node name 100,000 characters": ("kai.nodes", node(LONG).value or b"", "too_long"),
    "event id 100,000 characters": (
        "kai.queues",
        _with(queue("a").value or b"", id=LONG),
        "too_long",
    ),
    "source 100,000 characters": (
        "kai.queues",
        _with(queue("b").value or b"", source=LONG),
        "too_long",
    ),
    "[ x 10,000": ("kai.queues", b"[" * 10_000, "too_deep"),
    "extension NaN": ("kai.queues", _extension(queue("c").value or b"", "NaN"), "not_finite"),
    "extension Infinity": (
        "kai.queues",
        _extension(queue("d").value or b"", "Infinity"),
        "not_finite",
    ),
    "extension -Infinity": (
        "kai.queues",
        _extension(queue("e").value or b"", "-Infinity"),
        "not_finite",
    ),
    "node gpu 1e308": ("kai.nodes", node("n-big", gpu=1e308).value or b"", "out_of_range"),
    "allocation at 0001-01-01T00:00:00+01:00": (
        "kai.podgroups",
        _with(allocated("pg").value or b"", time="0001-01-01T00:00:00+01:00"),
        "out_of_range",
    ),
    "allocation at 9999-12-31T23:59:59-01:00": (
        "kai.podgroups",
        _with(allocated("pg").value or b"", time="9999-12-31T23:59:59-01:00"),
        "out_of_range",
    ),
}


def sink(engine: sa.Engine) -> BatchSink:
    return BatchSink(
        engine,
        consumer_group=GROUP,
        topic_roles=ROLES,
        dead_letter_topic="kai.dead-letter",
        sleep=lambda _: None,
    )


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_record_is_one_dead_letter_and_the_next_record_is_applied(
    engine: sa.Engine, name: str
) -> None:
    topic, value, kind = HOSTILE[name]
    valid = {"kai.queues": queue("ok"), "kai.podgroups": submitted("ok", "leaf")}.get(
        topic, node("ok")
    )
    records = [
        InboundRecord(topic, 0, 0, b"bad", value, None),
        InboundRecord(topic, 0, 1, valid.key, valid.value, None),
    ]
    outcome = sink(engine)(records)
    assert (outcome.applied, outcome.dead_lettered) == (1, 1)
    ((stored, got_kind),) = rows(engine, "SELECT value, kind FROM minruntime.dead_letters")
    assert (bytes(stored), got_kind) == (value, kind)


def test_a_conflicting_duplicate_is_a_dead_letter_not_a_silent_drop(engine: sa.Engine) -> None:
    first = cloud_event("queue.upserted", "q", {"name": "q"}, id_="same")
    changed = cloud_event(
        "queue.upserted", "q", {"name": "q", "reclaimMinRuntime": "1h"}, id_="same"
    )
    outcome = sink(engine)(
        [
            InboundRecord("kai.queues", 0, 0, b"q", first, None),
            InboundRecord("kai.queues", 0, 1, b"q", changed, None),
        ]
    )
    assert (outcome.applied, outcome.dead_lettered) == (1, 1)
    ((stored, kind),) = rows(engine, "SELECT value, kind FROM minruntime.dead_letters")
    assert (bytes(stored), kind) == (changed, "conflicting_duplicate")
