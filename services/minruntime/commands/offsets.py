"""`minruntime offsets show|rebaseline`: the processor's stored offsets and the topics' lives.

The processor refuses a topic whose stored offsets were read from another life of it (a topic
deleted and recreated, a new or restored cluster). `show` says which; `rebaseline` ties the
topic's offsets to the life Kafka holds now, starting from its first record (`--from-start`:
events already applied are recognised by their (source, id) and not applied twice) or after
its last one (`--from-end`: what the topic holds now is left unapplied, on purpose).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from minruntime.commands.common import Json, current_settings, units
from minruntime.errors import UserError
from minruntime.stream.offset_report import describe_kafka, partition_rows, status_of
from minruntime.topic_admin import input_topic_roles

offsets_app = typer.Typer(
    help="The processor's stored offsets, and re-baselining a topic whose life changed.",
    no_args_is_help=True,
)


class NothingToRebaselineError(UserError):
    """The topic's stored offsets already belong to its current life."""


@offsets_app.command("show")
def show_command(as_json: Json = False) -> None:
    """Stored next offsets per partition, the topic IDs and log ends Kafka has now, and the
    records still to apply (a transaction's commit marker takes an offset but is no record)."""
    settings = current_settings()
    with units() as made, made.connected() as unit:
        stored = unit.stored_offsets(settings.processor_group)
    topics = sorted(set(stored) | set(input_topic_roles(settings)))
    rows = partition_rows(settings, stored, topics)
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
    kafka = describe_kafka(settings, [topic]).get(topic)
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
