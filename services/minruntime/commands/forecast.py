"""`minruntime protection` as a group: the protection table (no subcommand) and
`protection forecast`, the running podgroups whose windows end in the next hours.

The table is ``minruntime.audit.protection`` (the live state, or the state at ``--at``); the
forecast is ``minruntime.audit.forecast`` (read-only, live state). This module parses the
options and renders; notes go to stderr, so ``--json`` output stays one JSON document.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from typing import Annotated

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table

from minruntime.audit.asof import state_at
from minruntime.audit.forecast import Forecast, describe, forecast
from minruntime.audit.protection import (
    ProtectionRow,
    ProtectionTable,
    describe_row,
    moment_text,
    protection_table,
    resolved_from_label,
)
from minruntime.audit.violations import whose
from minruntime.commands.common import At, Json, ReclaimerQueue, option, parse_at, units
from minruntime.commands.render import aligned, print_json, rfc3339, wide_console
from minruntime.core import format_duration

protection_app = typer.Typer(
    help="The protection table: each running podgroup's minimum runtime, window and verdict "
    "(`protection forecast`: whose windows end next).",
    invoke_without_command=True,
)

# Narrower consoles get one block per podgroup instead of the eight-column table.
_WIDE = 110


@protection_app.callback()
def protection_table_command(
    context: typer.Context,
    reclaimer_queue: ReclaimerQueue = None,
    at: At = None,
    json_output: Json = False,
) -> None:
    """The protection table: each running podgroup's minimum runtime, window and verdict."""
    if context.invoked_subcommand is not None:
        return
    instant = parse_at(at)
    # At a past instant only the podgroups a protection table reads are restored: the ones
    # pending or running at the snapshot and the ones the replayed tail names (``state_at``).
    with units() as made, state_at(made, instant, podgroups=()) as unit:
        table = protection_table(unit, instant, reclaimer_queue)
    for note in table.notes:
        print(f"minruntime: note: {note}", file=sys.stderr)
    if json_output:
        print_json([describe_row(row) for row in table.rows])
        return
    console = wide_console()
    console.print(render_protection(table, as_of=instant is not None, width=console.width))


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
    with units() as made:
        found = forecast(made, hours=hours, queue=queue)
    if json_output:
        print_json(describe(found))
        return
    sys.stdout.write("\n".join(forecast_lines(found)) + "\n")


def forecast_lines(found: Forecast) -> list[str]:
    """The forecast for people: a summary line, then one line per window, soonest first."""
    scope = f" in queue {found.queue}" if found.queue else ""
    head = (
        f"{len(found.expiries)} protection window(s) of {found.running} running "
        f"podgroup(s){scope} end in the next {found.hours:g}h (from {rfc3339(found.at)})"
    )
    if not found.expiries:
        return [head]
    rows = [["ENDS AT", "IN", "UID", "QUEUE", "RULE", "WINDOW", "FROM"]]
    for expiry in found.expiries:
        window, left = expiry.window, (expiry.ends_at - found.at).total_seconds()
        rows.append(
            [
                rfc3339(expiry.ends_at),
                format_duration(timedelta(seconds=round(left))),
                expiry.uid,
                expiry.queue or "-",
                whose(window),
                format_duration(window.min_runtime),
                f"queue {window.resolved_from}" if window.resolved_from else "pool default",
            ]
        )
    return [head, *aligned(rows)]


def render_protection(
    table: ProtectionTable, *, as_of: bool, width: int | None = None
) -> RenderableType:
    """The protection table for a terminal ``width`` wide: a heading line, then the rows.

    Below ``_WIDE`` columns the eight columns cannot all fit (Rich would fold timestamps and
    drop whole columns), so each podgroup becomes a two-line block instead: nothing is lost.
    """
    if table.reclaimer_queue is None:
        rule = "preempt rule (a preemptor in the podgroup's own queue)"
    else:
        rule = f"reclaim rule (a reclaimer in queue {escape(table.reclaimer_queue)})"
    heading = f"[bold]Protection[/] — {rule} — {moment_text(table.at, as_of)}"
    if not table.rows:
        return Group(heading, "no running podgroups")
    cells = [_protection_cells(row) for row in table.rows]
    if width is not None and width < _WIDE:
        return Group(heading, *(_protection_block(row) for row in cells))
    grid = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for header in _HEADERS:
        # Timestamps never fold; names wrap rather than being cut off with "…".
        grid.add_column(header, overflow="fold", no_wrap=header in ("start", "protected until"))
    grid.columns[-1].justify = "right"
    for row in cells:
        grid.add_row(*row)
    return Group(heading, grid)


_HEADERS = (
    "uid",
    "queue",
    "start",
    "min runtime",
    "resolved from",
    "protected until",
    "protected?",
    "evictable pods",
)


def _protection_cells(row: ProtectionRow) -> tuple[str, ...]:
    return (
        escape(row.uid),
        escape(row.queue) if row.queue is not None else "[dim](none)[/]",
        rfc3339(row.start_time),
        format_duration(row.min_runtime),
        escape(resolved_from_label(row.resolved_from, row.node_pool)),
        rfc3339(row.protected_until),
        "[bold]yes[/]" if row.is_protected else "no",
        str(row.evictable_pods),
    )


def _protection_block(cells: tuple[str, ...]) -> str:
    uid, queue, start, min_runtime, source, until, protected, evictable = cells
    return (
        f"[bold]{uid}[/] in {queue}: protected? {protected}, evictable pods {evictable}\n"
        f"  min runtime {min_runtime} from {source}; start {start}, protected until {until}"
    )
