"""`minruntime queues apply | config apply`: Kubernetes objects, sent as the events they stand for.

Both read manifests with `minruntime.kube` and translate them with `kube.change_events` (the
translation `whatif -f` uses too), then send through `minruntime produce`'s path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Final

import typer

from minruntime.commands.common import current_settings
from minruntime.events import ConfigUpdatedData, QueueUpsertedData
from minruntime.kube import ChangeData, Manifest, change_events, read_manifests
from minruntime.produce import prepare, send

ManifestFiles = Annotated[
    list[str],
    typer.Option(
        "--filename",
        "-f",
        help="A YAML file (several documents allowed), a directory of .yaml/.yml/.json files, "
        "or - for stdin. Repeatable.",
    ),
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print the events as JSON lines; send nothing.")
]
# A summary names at most this many queues, so it stays one line.
_NAMES_IN_SUMMARY: Final = 8


def queues_apply_command(files: ManifestFiles, dry_run: DryRun = False) -> None:
    """Send a queue.upserted per Queue object; every object is checked first (all or nothing)."""
    label = current_settings().kube_node_pool_label
    events = change_events(read_manifests(files), only="Queue", node_pool_label=label)
    topic = _send_events(events, dry_run=dry_run)
    if topic is not None:
        names = [data.name for _, _, data in events if isinstance(data, QueueUpsertedData)]
        shown = ", ".join(names[:_NAMES_IN_SUMMARY])
        if len(names) > _NAMES_IN_SUMMARY:
            shown += f", and {len(names) - _NAMES_IN_SUMMARY} more"
        print(f"sent {len(names)} queue.upserted event(s) to {topic}: {shown}")


def config_apply_command(
    files: ManifestFiles,
    node_pool: Annotated[
        str, typer.Option("--node-pool", help="The node pool (scheduler shard) it configures.")
    ] = "default",
    dry_run: DryRun = False,
) -> None:
    """Send the minruntime plugin's arguments of a scheduler config as one config.updated."""
    events = change_events(read_manifests(files), node_pool, only="config")
    topic = _send_events(events, dry_run=dry_run)
    if topic is not None:
        (update,) = [data for _, _, data in events if isinstance(data, ConfigUpdatedData)]
        arguments = update.model_dump(mode="json", by_alias=True, exclude={"node_pool"})
        shown = ", ".join(f"{name}={value}" for name, value in arguments.items())
        print(f"sent config.updated for node pool {update.node_pool} to {topic}: {shown}")


def _send_events(
    events: Sequence[tuple[Manifest, str, ChangeData]], *, dry_run: bool
) -> str | None:
    """Send through `minruntime produce`'s path, or print JSON lines; the topic if sent."""
    settings = current_settings()
    now = datetime.now(UTC)
    outgoing = [
        prepare(
            manifest.where,
            {"type": event_type, "data": data.model_dump(mode="json", exclude_none=True)},
            settings,
            now,
        )
        for manifest, event_type, data in events
    ]
    if dry_run:
        for record in outgoing:
            print(record.value.decode())
        return None
    asyncio.run(send(settings, outgoing))
    return outgoing[0].topic
