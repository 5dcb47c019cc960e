"""`minruntime offsets show|rebaseline`: the processor's stored offsets and the topics' lives.

The processor refuses a topic whose stored offsets were read from another life of it (a topic
deleted and recreated, a new or restored cluster). `show` says which; `rebaseline` ties the
topic's offsets to the life Kafka holds now, starting from its first record (`--from-start`:
events already applied are recognised by their (source, id) and not applied twice) or after
its last one (`--from-end`: what the topic holds now is left unapplied, on purpose).
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

from minruntime.bootstrap import input_topic_roles
from minruntime.commands.common import Json, current_settings, units
from minruntime.core.topic_life import StoredOffset, TopicLife, life_changed, untied
from minruntime.errors import UserError
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.stream.backlog import Behind, records_behind
from minruntime.stream.topic_identity import KafkaTopic, describe_topics

offsets_app = typer.Typer(
    help="The processor's stored offsets, and re-baselining a topic whose life changed.",
    no_args_is_help=True,
)


class NothingToRebaselineError(UserError):
    """The topic's stored offsets already belong to its current life."""


def _behind(settings: Settings, nexts: dict[tuple[str, int], int]) -> dict[tuple[str, int], Behind]:
    return asyncio.run(records_behind(kafka_access(settings), nexts))


def _describe(settings: Settings, topics: list[str]) -> dict[str, KafkaTopic]:
    return asyncio.run(describe_topics(kafka_access(settings), topics))


def status_of(topic: str, stored: list[StoredOffset], kafka: KafkaTopic | None) -> str:
    """One word or line for a topic: ok, untied, not in Kafka, or why it is refused."""
    if kafka is None:
        return "not in Kafka"
    if not stored:
        return "not consumed yet"
    reason = life_changed(topic, stored, TopicLife(kafka.topic_id, kafka.log_ends))
    if reason is not None:
        return f"REFUSED: {reason}"
    return "untied (tied at the next batch)" if untied(stored) else "ok"


@offsets_app.command("show")
def show_command(as_json: Json = False) -> None:
    """Stored next offsets per partition, the topic IDs and log ends Kafka has now, and the
    records still to apply (a transaction's commit marker takes an offset but is no record)."""
    settings = current_settings()
    with units() as made, made.connected() as unit:
        stored = unit.stored_offsets(settings.processor_group)
    topics = sorted(set(stored) | set(input_topic_roles(settings)))
    kafka = _describe(settings, topics)
    nexts = {
        (topic, row.partition): row.next_offset
        for topic in topics
        if status_of(topic, stored.get(topic, []), kafka.get(topic)) in _READABLE
        for row in stored.get(topic, [])
        if row.partition in kafka[topic].log_ends
    }
    behind = _behind(settings, nexts)
    rows: list[dict[str, Any]] = []
    for topic in topics:
        status = status_of(topic, stored.get(topic, []), kafka.get(topic))
        described = kafka.get(topic)
        partitions = sorted(
            {row.partition for row in stored.get(topic, [])}
            | set(described.log_ends if described else {})
        )
        by_partition = {row.partition: row for row in stored.get(topic, [])}
        for partition in partitions:
            row = by_partition.get(partition)
            counted = behind.get((topic, partition))
            rows.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "next_offset": row.next_offset if row else None,
                    "stored_topic_id": row.topic_id if row else None,
                    "kafka_topic_id": described.topic_id if described else None,
                    "log_start": described.log_starts.get(partition) if described else None,
                    "log_end": described.log_ends.get(partition) if described else None,
                    "behind": counted.records if counted else None,
                    "behind_exact": counted.exact if counted else None,
                    "status": status,
                }
            )
    if as_json:
        print(json.dumps({"consumer_group": settings.processor_group, "partitions": rows}))
        return
    print(f"consumer group {settings.processor_group}")
    for topic in topics:
        mine = [item for item in rows if item["topic"] == topic]
        first = mine[0] if mine else {}
        stored_ids = {item["stored_topic_id"] for item in mine} - {None}
        print(
            f"{topic}: {first.get('status', 'not in Kafka')}; Kafka topic ID "
            f"{first.get('kafka_topic_id') or '-'}, stored "
            f"{', '.join(sorted(stored_ids)) or '-'}"
        )
        for item in mine:
            print(
                f"  partition {item['partition']}: next offset {_dash(item['next_offset'])}, "
                f"log {_dash(item['log_start'])}..{_dash(item['log_end'])}"
                f"{_behind_text(item['behind'], item['behind_exact'])}"
            )


# Statuses whose stored offsets belong to the topic Kafka holds now (a backlog means something).
_READABLE = frozenset({"ok", "untied (tied at the next batch)"})


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _behind_text(records: int | None, exact: bool | None) -> str:
    if records is None:
        return ""
    return f", {'' if exact else 'at most '}{records} record(s) to apply"


@offsets_app.command("rebaseline")
def rebaseline_command(
    topic: Annotated[str, typer.Argument(help="The input topic to re-baseline.")],
    from_start: Annotated[
        bool,
        typer.Option(
            "--from-start",
            help="Apply the topic from its first record; events already applied (same source "
            "and id) are not applied twice. After a recreated topic, a restore, a new cluster.",
        ),
    ] = False,
    from_end: Annotated[
        bool,
        typer.Option(
            "--from-end",
            help="Leave what the topic holds now unapplied; apply only records produced "
            "from now on.",
        ),
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Re-baseline even a topic whose offsets look right."),
    ] = False,
) -> None:
    """Tie TOPIC's stored offsets to the life Kafka holds now; the processor resumes it."""
    if from_start == from_end:
        raise UserError("say where to start: --from-start or --from-end (exactly one)")
    settings = current_settings()
    inputs = sorted(input_topic_roles(settings))
    if topic not in inputs:
        raise UserError(f"{topic!r} is not an input topic of the processor: {', '.join(inputs)}")
    kafka = _describe(settings, [topic]).get(topic)
    if kafka is None:
        raise UserError(f"Kafka has no topic {topic!r}: create it (produce to it) first")
    start = kafka.log_starts if from_start else kafka.log_ends
    with units() as made, made.write() as unit:
        stored = unit.lock_topic(settings.processor_group, topic)
        status = status_of(topic, stored, kafka)
        if not status.startswith("REFUSED") and not force:
            raise NothingToRebaselineError(
                f"{topic}: its stored offsets belong to its current life ({status}); "
                "nothing to re-baseline (--force to reset them anyway)"
            )
        unit.rebaseline(settings.processor_group, topic, kafka.topic_id, start)
    where = "its first record" if from_start else "its end"
    offsets = ", ".join(f"{p}: {n}" for p, n in sorted(start.items()))
    print(
        f"{topic}: offsets re-baselined to topic ID {kafka.topic_id}, from {where} "
        f"(partition: next offset {offsets}); a running processor resumes it within "
        f"{settings.topic_recheck_seconds:g} s"
    )
