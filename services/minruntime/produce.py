"""`minruntime produce FILE...`: validate events from files and send them to their topics.

Files are JSON (one event or a list), JSONL (one event per line) or YAML (one or more
documents, each an event or a list); `-` reads standard input. Hand-written events may omit
`specversion`, `id` (a uuid4 is generated), `source` (`minruntime-cli`), `time` (now) and
`subject` (derived from `data`). Every event is validated against the contract before any is
sent: one invalid event sends nothing.

Records are keyed by the subject, in either content mode of the CloudEvents Kafka binding:
structured (the default: the whole event is the value) or binary (`--mode binary`: the
attributes in `ce_` headers, `datacontenttype` if given as `content-type`, the data as the
value).

The same files are also read as a change to try, never sent (`read_changes`: `whatif -f`,
`simulate -f`), where Queue objects and scheduler configs go through `kube.change_events`.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import yaml

from minruntime.core import format_rfc3339
from minruntime.errors import UserError
from minruntime.events import (
    Event,
    EventRejected,
    binary_headers,
    decode_event,
    encode_event,
    new_event,
)
from minruntime.events.topics import INPUT_ROLES, ROLE_TYPES, topic_types
from minruntime.kafka_access import kafka_access, start_client
from minruntime.kube import Manifest, change_events, read_manifests
from minruntime.settings import Settings
from minruntime.topic_admin import TopicRole, topic_names

CLI_SOURCE = "minruntime-cli"
# The content modes of the CloudEvents Kafka binding `produce` writes.
CONTENT_MODES = ("structured", "binary")
# Files of these suffixes are lists of events, one per line, in a change to try.
_EVENT_LIST_SUFFIXES: Final = (".jsonl", ".ndjson")
# The event types a change to try may hold: the queue topic's (queues and configurations).
CHANGE_TYPES: Final = ROLE_TYPES["queues"]


class InvalidEventFileError(UserError):
    """A file, or an event in it, cannot be read or does not follow the contract."""


@dataclass(frozen=True)
class Outgoing:
    """One validated record, ready to send."""

    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...] = ()


def read_documents(path: str) -> Iterator[tuple[str, Any]]:
    """(where, document) for every event in a JSON, JSONL or YAML file, or `-` for stdin."""
    name = "<stdin>" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidEventFileError(f"{name}: cannot read: {exc}") from exc
    suffix = Path(path).suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        documents = _jsonl(name, text)
    elif suffix == ".json":
        documents = [(name, _json(name, text))]
    else:  # .yaml, .yml, stdin: YAML is a superset of JSON
        documents = _yaml(name, text)
    for where, document in documents:
        if isinstance(document, list):
            yield from ((f"{where}[{i}]", item) for i, item in enumerate(document))
        elif document is not None:
            yield where, document


def _json(name: str, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidEventFileError(f"{name}: not valid JSON: {exc}") from exc


def _jsonl(name: str, text: str) -> list[tuple[str, Any]]:
    return [
        (f"{name}:{number}", _json(f"{name}:{number}", line))
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip()
    ]


def _yaml(name: str, text: str) -> list[tuple[str, Any]]:
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        problem = " ".join(str(exc).split())
        raise InvalidEventFileError(f"{name}: not valid YAML: {problem}") from exc
    if len(documents) == 1:
        return [(name, documents[0])]
    return [(f"{name} document {i}", doc) for i, doc in enumerate(documents, 1)]


def prepare(
    where: str, document: Any, settings: Settings, now: datetime, mode: str = "structured"
) -> Outgoing:
    """Fill the envelope's optional attributes, validate, and pick the topic.

    ``mode``: the record's content mode, ``structured`` or ``binary`` (validated as sent).
    """
    if mode not in CONTENT_MODES:
        raise ValueError(f"unknown content mode {mode!r} (use {' or '.join(CONTENT_MODES)})")
    if not isinstance(document, dict):
        raise InvalidEventFileError(f"{where}: an event must be an object")
    event_type = document.get("type")
    role = next((r for r in INPUT_ROLES if event_type in ROLE_TYPES[r]), None)
    if role is None:
        known = ", ".join(sorted(t for r in INPUT_ROLES for t in ROLE_TYPES[r]))
        raise InvalidEventFileError(f"{where}: unknown input event type {event_type!r} ({known})")
    names = {r.value: name for r, name in topic_names(settings).items()}
    filled = {
        "specversion": "1.0",
        "id": str(uuid.uuid4()),
        "source": CLI_SOURCE,
        "time": format_rfc3339(now),
        **document,
    }
    try:
        if "subject" not in filled:
            data = filled.get("data")
            filled["subject"] = new_event(
                str(event_type), data if isinstance(data, dict) else {}, time=now
            ).subject
        headers: list[tuple[str, bytes]] = []
        if mode == "binary":
            filled = json.loads(json.dumps(filled, default=str))  # plain JSON values
            headers, data = binary_headers(filled)
            value = json.dumps(data, separators=(",", ":")).encode()
        else:
            value = json.dumps(filled, separators=(",", ":"), default=str).encode()
        event = decode_event(
            value, names[role], topic_types=topic_types(names), headers=headers or None
        )
    except EventRejected as exc:
        raise InvalidEventFileError(f"{where}: {exc.kind}: {exc.message}") from exc
    return Outgoing(names[role], event.subject.encode(), value, tuple(headers))


def prepare_files(
    paths: Sequence[str], settings: Settings, mode: str = "structured"
) -> list[Outgoing]:
    """Every event of every file, validated; the first invalid one raises."""
    now = datetime.now(UTC)
    outgoing = [
        prepare(where, document, settings, now, mode)
        for path in paths
        for where, document in read_documents(path)
    ]
    if not outgoing:
        raise InvalidEventFileError("no events found in " + ", ".join(paths))
    return outgoing


async def send(settings: Settings, outgoing: Sequence[Outgoing]) -> Counter[str]:
    """Send in file order with an idempotent producer; wait until every record is stored."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    from minruntime.topic_admin import ensure_topics, topic_specs

    access = kafka_access(settings)
    try:
        await ensure_topics(access, topic_specs(settings))
        producer = AIOKafkaProducer(**access.client_kwargs(), enable_idempotence=True)
        await start_client(producer, access)  # a refused connection: KafkaAccessError, one line
    except (KafkaError, OSError) as exc:
        raise UserError(f"cannot use Kafka at {settings.kafka_bootstrap}: {exc}") from exc
    try:
        futures = [
            await producer.send(o.topic, o.value, key=o.key, headers=list(o.headers) or None)
            for o in outgoing
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return Counter(o.topic for o in outgoing)


def send_events(settings: Settings, events: Sequence[tuple[str, Event]]) -> str:
    """Send (topic role, event) pairs with an idempotent producer, encoded as the bridge
    encodes them (key: the subject; header: the id); the topics sent to, comma-separated."""
    names = topic_names(settings)
    outgoing = [
        Outgoing(
            names[TopicRole(role)],
            event.subject.encode(),
            encode_event(event),
            (("id", event.id.encode()),),
        )
        for role, event in events
    ]
    asyncio.run(send(settings, outgoing))
    return ", ".join(sorted({record.topic for record in outgoing}))


# -- a change to try (`whatif -f`, `simulate -f`): read and validated, never sent ----------------


def read_changes(
    paths: Sequence[str], node_pool: str, now: datetime, settings: Settings, *, source: str
) -> list[tuple[str, Event]]:
    """(origin, event) of every file, in file and document order: Queue objects and scheduler
    configs as `queues apply` / `config apply` would send them (with ``source``), events as
    `produce` would."""
    # Queue objects and scheduler configs are translated together (kube checks them as a set:
    # duplicates, cycles, one config) and put back in place.
    slots: list[tuple[str, Event] | Manifest] = []
    for path in paths:
        if Path(path).suffix.lower() in _EVENT_LIST_SUFFIXES:
            slots += [_change_event(w, doc, settings, now) for w, doc in read_documents(path)]
            continue
        for manifest in read_manifests([path]):
            slots += _classified(manifest, settings, now)
    manifests = [slot for slot in slots if isinstance(slot, Manifest)]
    label = settings.kube_node_pool_label
    translated = iter(change_events(manifests, node_pool, node_pool_label=label))
    events: list[tuple[str, Event]] = []
    for slot in slots:
        if not isinstance(slot, Manifest):
            events.append(slot)
            continue
        _, event_type, data = next(translated)
        events.append((slot.where, new_event(event_type, data, time=now, source=source)))
    return events


def _classified(
    manifest: Manifest, settings: Settings, now: datetime
) -> list[tuple[str, Event] | Manifest]:
    body = manifest.body
    if isinstance(body, list):
        return [
            _change_event(f"{manifest.where}[{i}]", item, settings, now)
            for i, item in enumerate(body)
        ]
    if isinstance(body, Mapping):
        kind = body.get("kind")
        if kind in ("Queue", "ConfigMap") or (kind is None and "tiers" in body):
            return [manifest]
        if kind is None and "apiVersion" not in body and "type" in body:
            return [_change_event(manifest.where, body, settings, now)]
        if kind is not None:
            raise UserError(
                f"{manifest.where}: kind: a {kind} is not accepted here: `minruntime whatif -f` "
                "takes scheduling.run.ai/v2 Queue objects, a scheduler config (or its "
                "ConfigMap) and queue.upserted/queue.deleted/config.updated events"
            )
    raise UserError(
        f"{manifest.where}: neither a Queue, a scheduler config nor an event "
        "(an event has type: and data:)"
    )


def _change_event(
    where: str, document: Any, settings: Settings, now: datetime
) -> tuple[str, Event]:
    event = decode_event(prepare(where, document, settings, now).value)
    if event.type not in CHANGE_TYPES:
        raise UserError(
            f"{where}: whatif tries queue and configuration changes "
            f"({', '.join(sorted(CHANGE_TYPES))}), not {event.type}"
        )
    return where, event
