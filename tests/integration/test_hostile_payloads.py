"""Each hostile payload of issue 12, one at a time, through the processor's BatchSink.

The e2e corpus (tests/e2e/test_hostile_records.py) runs them all against a real processor; here
each one reproduces its own finding on real PostgreSQL: before the bounds and the isolation,
the long identifiers and the NaN extension made the sink give up (StorageUnavailableError:
exit 75 and a crash loop), `[` x 10,000 raised RecursionError (exit 70), and gpu 1e308, the
year-0 timestamp and the conflicting duplicate were applied or dropped without a dead letter.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from minruntime.ingest import InboundRecord
from tests.cloudevents import (
    LONG,
    allocated,
    event,
    message,
    node,
    queue,
    submitted,
    wire,
    with_extension,
)
from tests.integration.helpers import rows, sink

HOSTILE: dict[str, tuple[str, bytes, str]] = {
    "queue name 100,000 characters": ("kai.queues", wire(queue(LONG)), "too_long"),
    "podgroup uid 100,000 characters": (
        "kai.podgroups",
        wire(submitted(LONG, "leaf")),
        "too_long",
    ),
    "node name 100,000 characters": ("kai.nodes", wire(node(LONG)), "too_long"),
    "event id 100,000 characters": (
        "kai.queues",
        wire(queue("a", id=LONG)),
        "too_long",
    ),
    "source 100,000 characters": (
        "kai.queues",
        wire(queue("b", source=LONG)),
        "too_long",
    ),
    "[ x 10,000": ("kai.queues", b"[" * 10_000, "too_deep"),
    "extension NaN": ("kai.queues", with_extension(queue("c"), "NaN"), "not_finite"),
    "extension Infinity": (
        "kai.queues",
        with_extension(queue("d"), "Infinity"),
        "not_finite",
    ),
    "extension -Infinity": (
        "kai.queues",
        with_extension(queue("e"), "-Infinity"),
        "not_finite",
    ),
    "node gpu 1e308": ("kai.nodes", wire(node("n-big", gpu=1e308)), "out_of_range"),
    "allocation at 0001-01-01T00:00:00+01:00": (
        "kai.podgroups",
        wire(allocated("pg", time="0001-01-01T00:00:00+01:00")),
        "out_of_range",
    ),
    "allocation at 9999-12-31T23:59:59-01:00": (
        "kai.podgroups",
        wire(allocated("pg", time="9999-12-31T23:59:59-01:00")),
        "out_of_range",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_record_is_one_dead_letter_and_the_next_record_is_applied(
    engine: sa.Engine, name: str
) -> None:
    topic, value, kind = HOSTILE[name]
    valid = message(
        {"kai.queues": queue("ok"), "kai.podgroups": submitted("ok", "leaf")}.get(topic, node("ok"))
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
    first = wire(event("queue.upserted", "q", {"name": "q"}, id="same"))
    changed = wire(
        event("queue.upserted", "q", {"name": "q", "reclaimMinRuntime": "1h"}, id="same")
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
