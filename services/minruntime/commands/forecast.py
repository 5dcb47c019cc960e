"""`minruntime protection` as a group: the protection table (no subcommand, as before) and
`protection forecast`, the running podgroups whose windows end in the next hours.

The table is ``commands.explain.protection_command``, unchanged; the group only adds the
subcommand beside it. The forecast is ``minruntime.audit.forecast`` (read-only, live state).
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from minruntime.commands.common import At, Json, ReclaimerQueue, disposed, engine, option
from minruntime.commands.explain import protection_command
from minruntime.commands.render import print_json

protection_app = typer.Typer(
    help="The protection table: each running podgroup's minimum runtime, window and verdict "
    "(`protection forecast`: whose windows end next).",
    invoke_without_command=True,
)


@protection_app.callback()
def protection_table(
    context: typer.Context,
    reclaimer_queue: ReclaimerQueue = None,
    at: At = None,
    json_output: Json = False,
) -> None:
    """The protection table: each running podgroup's minimum runtime, window and verdict."""
    if context.invoked_subcommand is None:
        protection_command(reclaimer_queue, at, json_output)


@protection_app.command("forecast")
def forecast_command(
    hours: Annotated[
        float,
        option("--hours", metavar="N", help="How far ahead to look, in hours (default 24)."),
    ] = 24.0,
    queue: Annotated[
        str | None, option("--queue", metavar="QUEUE", help="Only podgroups of this queue.")
    ] = None,
    json_output: Json = False,
) -> None:
    """Running podgroups that lose a protection window in the next N hours, and when, per rule
    (preempt; reclaim from each root or common ancestor): who can be preempted next."""
    from minruntime.audit.forecast import describe, forecast, lines

    with disposed(engine()) as database:
        found = forecast(database, hours=hours, queue=queue)
    if json_output:
        print_json(describe(found))
        return
    sys.stdout.write("\n".join(lines(found)) + "\n")
