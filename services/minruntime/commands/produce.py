"""`minruntime produce`: events from files, checked against the contract, sent to their topics."""

from __future__ import annotations

import asyncio
from enum import StrEnum
from typing import Annotated

import typer

from minruntime.commands import render
from minruntime.commands.common import current_settings
from minruntime.produce import prepare_files, send

console = render.console()


class ContentMode(StrEnum):
    """The content modes of the CloudEvents Kafka binding (docs/events.md, "Content modes")."""

    STRUCTURED = "structured"
    BINARY = "binary"


def produce_command(
    files: Annotated[list[str], typer.Argument(help="JSON, JSONL or YAML files; - for stdin.")],
    mode: Annotated[
        ContentMode,
        typer.Option(
            "--mode",
            help="CloudEvents Kafka content mode: structured (the event is the value) or "
            "binary (attributes in ce_ headers, the data is the value).",
        ),
    ] = ContentMode.STRUCTURED,
) -> None:
    """Validate events against the contract and send them to their topics (all or nothing)."""
    settings = current_settings()
    counts = asyncio.run(send(settings, prepare_files(files, settings, mode.value)))
    summary = ", ".join(f"{topic}: {count}" for topic, count in sorted(counts.items()))
    console.print(f"sent {sum(counts.values())} events ({summary})")
