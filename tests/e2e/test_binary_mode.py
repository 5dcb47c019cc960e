"""Binary content mode end to end: the CloudEvents SDK + aiokafka in, SQL out.

A podgroup is submitted as a binary-mode record (attributes in ``ce_`` headers, the data as
the value) made by the official CloudEvents SDK's Kafka binding and sent with a plain aiokafka
producer, as an outside producer would; it is allocated by a structured record. The real
processor applies both; the event log holds the structured event; a record with malformed
headers is dead-lettered with ``bad_binary_headers`` and its original headers; and a replay
from Kafka decodes both modes into the same state.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cloudevents.core.bindings import kafka
from cloudevents.core.v1.event import CloudEvent

from minruntime.events import decode_dead_letter
from minruntime.kafka_access import start_client
from tests import cloudevents as ce
from tests.conftest import run_cli
from tests.e2e.harness import Pipeline, wait_for

pytestmark = pytest.mark.stack

UID = "bin-pg-1"


Record = tuple[bytes | None, bytes, list[tuple[str, bytes]]]


def record_of(message: kafka.KafkaMessage) -> Record:
    """(key, value, headers) of the SDK's Kafka message, as a Kafka client sends them."""
    key = message.key.encode() if isinstance(message.key, str) else message.key
    return key, message.value, list(message.headers.items())


def send(pipeline: Pipeline, role: str, records: Sequence[Record]) -> None:
    """Send (key, value, headers) records with a plain aiokafka producer."""

    async def run() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(**pipeline.kafka.client_kwargs(), enable_idempotence=True)
        await start_client(producer, pipeline.kafka)
        try:
            for key, value, headers in records:
                topic = pipeline.topics[role]
                await (await producer.send(topic, value, key=key, headers=headers))
        finally:
            await producer.stop()

    asyncio.run(run())


def submitted_event() -> dict[str, Any]:
    return ce.submitted(
        UID,
        "leaf1",
        [{"name": "p0", "gpu": 1}, {"name": "p1", "gpu": 0.5}],
        name="train",
        namespace="team-a",
        time=datetime(2026, 11, 21, 9, 0, tzinfo=UTC),
        id="bin-submitted-1",
        source="tests/e2e/sdk",
        datacontenttype="application/json",
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )


def test_a_binary_podgroup_is_applied_and_malformed_headers_are_dead_lettered(
    pipeline: Pipeline,
) -> None:
    pipeline.produce_events("queues", [*ce.design_tree(), ce.config()])
    message = ce.binary(submitted_event(), key_mapper=lambda e: e.get_subject())
    assert message.headers["ce_type"] == b"podgroup.submitted"
    assert message.headers["content-type"] == b"application/json"
    send(pipeline, "podgroups", [record_of(message)])

    def podgroup() -> tuple[object, ...] | None:
        rows = pipeline.query(
            "SELECT status, queue, priority, name FROM minruntime.podgroups WHERE uid = %s",
            (UID,),
        )
        return tuple(rows[0]) if rows else None

    wait_for(podgroup, 60, f"the binary podgroup.submitted in SQL\n{pipeline.log_tail()}")
    assert podgroup() == ("pending", "leaf1", 100, "train")

    # The event log stores the equivalent structured CloudEvent.
    [(payload, event_id, type_)] = pipeline.query(
        "SELECT payload, id, type FROM minruntime.event_log WHERE subject = %s", (UID,)
    )
    assert (event_id, type_) == ("bin-submitted-1", "podgroup.submitted")
    assert payload["specversion"] == "1.0"
    assert payload["source"] == "tests/e2e/sdk"
    assert payload["time"] == "2026-11-21T09:00:00Z"
    assert payload["datacontenttype"] == "application/json"
    assert payload["traceparent"].startswith("00-4bf9")
    assert payload["data"]["pods"] == [{"name": "p0", "gpu": 1}, {"name": "p1", "gpu": 0.5}]

    # A structured record allocates it: both modes on one topic.
    pipeline.produce_events("podgroups", [ce.allocated(UID, ["p0", "p1"], ce.at(10))])
    wait_for(
        lambda: podgroup() is not None and podgroup()[0] == "running",  # type: ignore[index]
        60,
        f"the structured podgroup.allocated\n{pipeline.log_tail()}",
    )

    # Malformed headers: a duplicated ce_id and a source that is not UTF-8; no record key.
    bad = kafka.to_binary_event(
        CloudEvent(
            attributes={"type": "podgroup.deleted", "source": "x", "subject": UID},
            data={"uid": UID},
        )
    )
    headers = {
        **bad.headers,
        "ce_source": b"\xff\xfesdk",
        "ce_partitionkey": UID.encode(),
    }
    original = [*headers.items(), ("ce_id", b"bin-deleted-again")]
    send(pipeline, "podgroups", [(None, bad.value, original)])

    def dead() -> list[tuple[str, str, object]]:
        return pipeline.query(
            "SELECT kind, message, headers FROM minruntime.dead_letters WHERE topic = %s",
            (pipeline.topics["podgroups"],),
        )

    wait_for(dead, 60, f"the malformed record dead-lettered\n{pipeline.log_tail()}")
    [(kind, reason, stored)] = dead()
    assert kind == "bad_binary_headers"
    assert reason.startswith("binary-mode CloudEvent: header 'ce_source' is not UTF-8 text")
    assert [header["name"] for header in stored] == [name for name, _ in original]
    assert {"name": "ce_source", "value": "//5zZGs=", "valueEncoding": "base64"} in stored
    # Not applied: still running.
    assert podgroup()[0] == "running"  # type: ignore[index]

    # The dead letter on Kafka keeps the original headers, keyed by the partitionkey.
    letters = pipeline.consume("dead_letter", 1, timeout=60)
    assert len(letters) == 1
    letter = decode_dead_letter(letters[0].value)
    assert letters[0].key == UID.encode()
    assert (letter.error_kind, letter.key, letter.header_count) == (
        "bad_binary_headers",
        None,
        len(original),
    )
    assert letter.original_headers() == original
    assert letter.original_value() == bad.value
    assert json.loads(letter.original_value() or b"") == {"uid": UID}

    # A replay from Kafka decodes both modes as the processor did: the same state.
    replayed = pipeline.replay("--from-kafka", "--verify", "--json")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr


def test_produce_in_binary_mode_is_applied(pipeline: Pipeline, tmp_path: Path) -> None:
    events = tmp_path / "nodes.jsonl"
    events.write_text(
        json.dumps({"type": "node.upserted", "id": "bin-node-1", "data": {"name": "bn1", "gpu": 8}})
        + "\n"
    )
    result = run_cli("produce", "--mode", "binary", str(events), env=pipeline.env)
    assert result.returncode == 0, result.stderr
    [record] = pipeline.consume("nodes", 1)
    headers = dict(record.headers)
    assert (record.key, record.value) == (b"bn1", b'{"name":"bn1","gpu":8}')
    assert (headers["ce_id"], headers["ce_type"]) == (b"bin-node-1", b"node.upserted")
    wait_for(
        lambda: pipeline.query("SELECT gpu FROM minruntime.nodes WHERE name = 'bn1'"),
        60,
        f"the binary node.upserted in SQL\n{pipeline.log_tail()}",
    )
    payload = pipeline.scalar("SELECT payload FROM minruntime.event_log WHERE id = 'bin-node-1'")
    assert (payload["source"], payload["data"]) == ("minruntime-cli", {"name": "bn1", "gpu": 8})
