"""``apply_batch``: one Kafka batch applied to the projections inside the caller's transaction.

Effectively once: the next offset of every partition is stored in the same transaction as the
state it produced, so a redelivered record is recognised by its offset and skipped; an event
re-published under a new offset is recognised by its CloudEvents ``(source, id)`` in the event
log. Bad input never raises: it is dead-lettered (table + outbox) and the batch goes on.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.core import MinRuntimeError
from minruntime.core.topic_life import TopicLife
from minruntime.events import (
    DEAD_LETTER_TOPIC,
    ROLE_TYPES,
    TOPIC_TYPES,
    Event,
    EventRejected,
    EventType,
    Header,
    dead_letter_key,
    dead_letter_record,
    decode_event,
    record_key,
    structured_value,
)
from minruntime.ingest.projection import Projections
from minruntime.ingest.records import BatchOutcome, DeadLetter, InboundRecord, event_log_row
from minruntime.store import event_log
from minruntime.store.dead_letters import record_dead_letters
from minruntime.store.offsets import lock_offsets, store_offsets
from minruntime.store.outbox import OutboxMessage, enqueue
from minruntime.store.requeue import notify_nominated
from minruntime.store.schema import LIVE, StateTables

# Stable outbox ids: the same record dead-lettered twice (a retried batch) is one message.
_DEAD_LETTER_NAMESPACE: Final = uuid.UUID("6d1f3c2e-5b8a-4c3e-9f41-0a7d2b9e8c15")
UNSTORABLE_TEXT: Final = "unstorable_text"
# A (source, id) already applied (or earlier in the batch) with other content: one of the two
# is not what its producer meant, and dropping it silently would hide that.
CONFLICTING_DUPLICATE: Final = "conflicting_duplicate"
_UNSTORABLE_CHARS: Final = re.compile("[\x00\ud800-\udfff]")


# A record that decoded: (record, event, payload). ``payload`` is the event's structured form,
# the event log's payload: the record value itself for a structured-mode record, the
# equivalent structured event for a binary-mode one (``events.structured_value``). A plain
# tuple: one is made for every record applied.
Decoded = tuple[InboundRecord, Event, bytes]
# A record that cannot be applied: (record, dead-letter kind, message, its event if it decoded).
Rejected = tuple[InboundRecord, str, str, Event | None]
# What ``decode_ahead`` made of a batch: (topic, partition, offset) -> decoded or rejected.
DecodedAhead = Mapping[tuple[str, int, int], Decoded | Rejected]


class _Batch:
    """The in-memory state of one batch between loading and writing."""

    def __init__(
        self,
        conn: Connection,
        tables: StateTables,
        group: str,
        topic_roles: Mapping[str, str] | None,
        dead_letter_topic: str = DEAD_LETTER_TOPIC,
        topic_lives: Mapping[str, TopicLife] | None = None,
    ):
        self.conn = conn
        self.tables = tables
        self.topic_lives = topic_lives
        self.group = group
        self.topic_types = topic_types_for(topic_roles)
        self.dead_letter_topic = dead_letter_topic
        self.outcome = BatchOutcome()
        self.dead: list[DeadLetter] = []
        self.dead_ids: dict[int, tuple[str | None, str | None]] = {}
        self.logged: list[dict[str, Any]] = []

    def fresh_records(self, records: Sequence[InboundRecord]) -> list[InboundRecord]:
        """Lock this group's offset rows and drop records at offsets already applied."""
        partitions = sorted({(record.topic, record.partition) for record in records})
        if not partitions:
            return []
        next_offsets = lock_offsets(
            self.conn, self.tables, self.group, partitions, self.topic_lives
        )
        stored = dict(next_offsets)
        fresh = []
        for record in records:
            where = (record.topic, record.partition)
            if record.offset < next_offsets[where]:
                self.outcome.skipped_offsets += 1
                continue
            next_offsets[where] = record.offset + 1
            fresh.append(record)
        self.outcome.next_offsets = next_offsets
        changed = {
            where: offset for where, offset in next_offsets.items() if stored[where] != offset
        }
        store_offsets(self.conn, self.tables, self.group, changed)
        return fresh

    def decode(
        self, records: list[InboundRecord], ahead: DecodedAhead | None = None
    ) -> list[Decoded]:
        """Decode every record (or take what ``decode_ahead`` made of it); rejected ones become
        dead letters."""
        decoded = []
        for record in records:
            found = (
                None
                if ahead is None
                else ahead.get((record.topic, record.partition, record.offset))
            )
            if found is None or found[0] is not record:  # not decoded ahead: decode it now
                found = _decoded(record, self.topic_types)
            if len(found) == 3:
                decoded.append(found)
            else:
                _, kind, message, event = found
                self.dead_letter(record, kind, message, event)
        return decoded

    def dead_letter(
        self, record: InboundRecord, kind: str, message: str, event: Event | None = None
    ) -> None:
        """Record why ``record`` could not be applied."""
        self.dead.append(DeadLetter(record, kind, message))
        if event is not None:
            self.dead_ids[len(self.dead) - 1] = (event.id, event.type)
        self.outcome.dead_lettered += 1
        self.outcome.dead_letter_kinds[kind] += 1

    def unseen(self, decoded: list[Decoded]) -> set[tuple[str, str]]:
        """The (source, id) pairs of this batch already in the event log."""
        keys = {(event.source, event.id) for _, event, _ in decoded}
        return event_log.logged_ids(self.conn, self.tables, keys)

    def conflicts(self, decoded: list[Decoded], seen: set[tuple[str, str]]) -> dict[int, str]:
        """Index in ``decoded`` -> where its (source, id) was applied with other content."""
        again = [
            (index, event.source, event.id, payload.decode("utf-8"))
            for index, (_, event, payload) in enumerate(decoded)
            if (event.source, event.id) in seen
        ]
        return event_log.conflicting(self.conn, self.tables, again)

    def log(self, item: Decoded) -> None:
        """Remember an applied event for the event log (its structured form: the payload)."""
        record, event, payload = item
        self.outcome.applied += 1
        self.outcome.applied_types[event.type] += 1
        row = event_log_row(event, payload, record.topic, record.partition, record.offset)
        self.logged.append(row)

    def write_logs(self) -> None:
        """Insert the event log and the dead letters (table and outbox)."""
        event_log.append(self.conn, self.tables, self.logged)
        if not self.dead:
            return
        now = datetime.now(UTC)
        letters, messages = [], []
        for index, letter in enumerate(self.dead):
            record = letter.record
            event_id, event_type = self.dead_ids.get(index, (None, None))
            letters.append(
                {
                    "topic": record.topic,
                    "partition": record.partition,
                    "offset": record.offset,
                    "key": record.key,
                    "value": record.value,
                    "key_text": _text_or_none(record.key),
                    "value_text": _text_or_none(record.value),
                    "headers": _headers_json(record.headers),
                    "kind": letter.kind,
                    "message": letter.message,
                    "at": now,
                }
            )
            outbox_id = uuid.uuid5(
                _DEAD_LETTER_NAMESPACE, f"{record.topic}/{record.partition}/{record.offset}"
            )
            messages.append(
                OutboxMessage(
                    id=outbox_id,
                    topic=self.dead_letter_topic,
                    key=dead_letter_key(record_key(record.key, record.value, record.headers)),
                    payload=dead_letter_record(
                        key=record.key,
                        value=record.value,
                        topic=record.topic,
                        partition=record.partition,
                        offset=record.offset,
                        kind=letter.kind,
                        message=letter.message,
                        time=now,
                        event_id=event_id,
                        event_type=event_type,
                        headers=record.headers,
                    ),
                    headers={"id": str(outbox_id), "errorKind": letter.kind},
                )
            )
        record_dead_letters(self.conn, self.tables, letters)
        enqueue(self.conn, self.tables, messages)


def decode_ahead(
    records: Sequence[InboundRecord], topic_roles: Mapping[str, str] | None = None
) -> DecodedAhead:
    """Decode and validate ``records`` outside any transaction (the pure part of
    ``apply_batch``): what ``apply_batch(..., ahead=...)`` would decode, keyed by where each
    record was consumed.

    The processor decodes the next batch of a topic while the current one is written
    (stream.consumer): decoding reads nothing but the record's bytes, so doing it early
    changes nothing but when it happens; which of these records are applied (their offsets,
    their ids) is still decided inside the batch's transaction.
    """
    topic_types = topic_types_for(topic_roles)
    return {
        (record.topic, record.partition, record.offset): _decoded(record, topic_types)
        for record in records
    }


def _decoded(
    record: InboundRecord, topic_types: Mapping[str, frozenset[str]]
) -> Decoded | Rejected:
    """The record decoded, or why it cannot be (its dead letter's kind and message)."""
    value = record.value
    try:
        if record.headers:  # a binary-mode record becomes its structured event
            value = structured_value(value, record.headers)
        event = decode_event(value, record.topic, topic_types=topic_types)
    except EventRejected as rejected:
        return (record, rejected.kind, rejected.message, None)
    assert value is not None  # decoded events always have a value
    # One-byte search first: most events hold no escape at all.
    if b"\\" in value and b"\\u" in value and _unstorable(value):
        return (
            record,
            UNSTORABLE_TEXT,
            "a string contains NUL (\\u0000) or an unpaired surrogate (\\ud800-\\udfff), "
            "which PostgreSQL cannot store; remove it",
            event,
        )
    return (record, event, value)


def topic_types_for(topic_roles: Mapping[str, str] | None) -> Mapping[str, frozenset[str]]:
    """Topic name -> event types it may carry, from topic name -> role (None: default names)."""
    if topic_roles is None:
        return TOPIC_TYPES
    return {topic: ROLE_TYPES[role] for topic, role in topic_roles.items()}


def apply_batch(
    conn: Connection,
    records: Sequence[InboundRecord],
    *,
    consumer_group: str,
    topic_roles: Mapping[str, str] | None = None,
    dead_letter_topic: str = DEAD_LETTER_TOPIC,
    topic_lives: Mapping[str, TopicLife] | None = None,
    tables: StateTables = LIVE,
    ahead: DecodedAhead | None = None,
) -> BatchOutcome:
    """Apply one Kafka batch inside the caller's transaction and store the next offsets.

    ``topic_roles`` maps each consumed topic name to its role (``queues``, ``podgroups``,
    ``nodes``, ``nominations``); None means the default topic names. A record from a topic
    that is not mapped is a configuration error (LookupError), not bad input. Dead letters
    are written to the outbox for ``dead_letter_topic``. ``topic_lives`` (topic -> what Kafka
    holds now) ties the stored offsets to each topic's life: a batch of a topic whose offsets
    came from another life raises TopicLifeChangedError and stores nothing (None: no check).
    ``tables``: the state tables to apply to (a shadow's for replays and what-ifs).
    ``ahead``: the records already decoded by ``decode_ahead`` (any record it lacks is decoded
    here); only the records at offsets not applied yet are used, as without it.
    """
    batch = _Batch(conn, tables, consumer_group, topic_roles, dead_letter_topic, topic_lives)
    decoded = batch.decode(batch.fresh_records(records), ahead)
    seen = batch.unseen(decoded)
    conflicts = batch.conflicts(decoded, seen)
    applied_here: dict[tuple[str, str], Decoded] = {}
    projections = Projections(conn, tables)
    projections.include(event for _, event, _ in decoded)
    for index, item in enumerate(decoded):
        record, event, _ = item
        key = (event.source, event.id)
        if key in seen:
            first = applied_here.get(key)
            where = conflicts.get(index) if first is None else _differs(first, item)
            if where is None:
                batch.outcome.duplicate_ids += 1
            else:
                batch.dead_letter(record, CONFLICTING_DUPLICATE, _conflict(event, where), event)
            continue
        try:
            projections.apply(event)
        except MinRuntimeError as error:
            batch.dead_letter(record, error.kind, str(error), event)
            continue
        seen.add(key)
        applied_here[key] = item
        batch.log(item)
    projections.flush()
    batch.outcome.lost_runs = projections.runs.lost
    batch.outcome.ignored_values.update(projections.ignored)
    batch.write_logs()
    if batch.outcome.applied_types[str(EventType.REQUEUE_NOMINATED)] and tables.is_live:
        # Delivered at commit: a requeue worker waiting on this channel runs a cycle now.
        notify_nominated(conn)
    return batch.outcome


def dead_letter_alone(
    conn: Connection,
    record: InboundRecord,
    kind: str,
    message: str,
    *,
    consumer_group: str,
    topic_roles: Mapping[str, str] | None = None,
    dead_letter_topic: str = DEAD_LETTER_TOPIC,
    topic_lives: Mapping[str, TopicLife] | None = None,
    tables: StateTables = LIVE,
) -> BatchOutcome:
    """Dead-letter one record that cannot be applied, with its offset, in the caller's transaction.

    Used by ``minruntime.ingest.isolation`` once a record is found to fail for a reason that
    retrying cannot cure; a record already applied (its offset is stored) is skipped.
    """
    batch = _Batch(conn, tables, consumer_group, topic_roles, dead_letter_topic, topic_lives)
    for fresh in batch.fresh_records([record]):
        batch.dead_letter(fresh, kind, message, _event_or_none(fresh, batch.topic_types))
    batch.write_logs()
    return batch.outcome


def _event_or_none(
    record: InboundRecord, topic_types: Mapping[str, frozenset[str]]
) -> Event | None:
    # Only for the dead letter's eventId/eventType: a record that cannot be decoded has none.
    try:
        return decode_event(
            record.value, record.topic, topic_types=topic_types, headers=record.headers
        )
    except Exception:  # best effort: the dead letter is written either way
        return None


def _differs(first: Decoded, again: Decoded) -> str | None:
    """Where ``first`` was consumed if ``again`` carries other content, else None."""
    if first[2] == again[2]:
        return None
    # Parsed, as jsonb compares: other whitespace or key order is the same event (in either
    # content mode: the payloads are structured). Both were decoded already, so they are JSON
    # within the depth bound.
    if json.loads(first[2]) == json.loads(again[2]):
        return None
    where = first[0]
    return f"{where.topic}/{where.partition}@{where.offset}"


def _conflict(event: Event, where: str) -> str:
    return (
        f"event (source {event.source!r}, id {event.id!r}) was already applied with other "
        f"content (at {where}); an event keeps its id only when it is sent again unchanged: "
        "give a changed event a new id"
    )


def _headers_json(headers: Sequence[Header]) -> str | None:
    """The record's headers for ``dead_letter_log.headers`` (jsonb; NULL without headers):
    ``[{"name", "value", "valueEncoding"}]`` in order, the value UTF-8 text or base64."""
    if not headers:
        return None
    return json.dumps(
        [
            {"name": name, "value": text, "valueEncoding": encoding}
            for name, raw in headers
            for text, encoding in (_encoded_text(raw),)
        ]
    )


def _encoded_text(raw: bytes | None) -> tuple[str | None, str]:
    if raw is None:
        return None, "utf-8"
    text = _text_or_none(raw)
    if text is not None:
        return text, "utf-8"
    return base64.b64encode(raw).decode("ascii"), "base64"


def _text_or_none(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def _unstorable(value: bytes) -> bool:
    def walk(item: Any) -> Iterator[str]:
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for key, inner in item.items():
                yield key
                yield from walk(inner)
        elif isinstance(item, list):
            for inner in item:
                yield from walk(inner)

    return any(_UNSTORABLE_CHARS.search(text) for text in walk(json.loads(value)))
