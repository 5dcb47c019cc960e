"""`minruntime outbox list|retry`: the outbox rows the broker refused for good, and retrying them.

The relay sets a row aside when Kafka refuses it for a reason that will not change on retry
(docs/events.md, "Outbox rows the broker refuses"). ``list`` shows them (the same rows as the
view ``minruntime.outbox_set_aside``); ``retry`` puts them back in the queue once the cause is
fixed (say, the broker's ``message.max.bytes`` raised), and the relays publish them at once.
"""

from __future__ import annotations

import uuid
from typing import Annotated

import typer

from minruntime.commands.common import Json, units
from minruntime.commands.render import print_json
from minruntime.errors import UserError

outbox_app = typer.Typer(
    help="Outbox rows the broker refused for good (set aside by the relay), and retrying them.",
    no_args_is_help=True,
)

Ids = Annotated[
    list[str] | None,
    typer.Argument(metavar="[ID]...", help="Row ids to retry.", show_default=False),
]
All = Annotated[bool, typer.Option("--all", help="Retry every set-aside row.")]


@outbox_app.command("list")
def list_command(json_output: Json = False) -> None:
    """The set-aside rows: id, topic, size, when and why."""
    with units() as made, made.connected() as unit:
        rows = unit.set_aside_outbox()
    if json_output:
        print_json(rows)
        return
    if not rows:
        print("no outbox row is set aside")
        return
    for row in rows:
        print(
            f"{row['id']}  {row['topic']}  {row['payload_bytes']} bytes  "
            f"{row['failed_at'].isoformat()}  attempts={row['attempts']}  {row['failure']}"
        )


@outbox_app.command("retry")
def retry_command(ids: Ids = None, retry_all: All = False) -> None:
    """Put set-aside rows back in the queue (the relays publish them at once)."""
    if bool(ids) == retry_all:
        raise UserError("name the row ids to retry, or pass --all (not both)")
    for row_id in ids or ():
        try:
            uuid.UUID(row_id)
        except ValueError:
            raise UserError(f"{row_id!r} is not an outbox row id (a UUID)") from None
    with units() as made, made.write() as unit:
        count = unit.retry_set_aside(None if retry_all else ids)
    print(f"{count} outbox row(s) put back in the queue")
