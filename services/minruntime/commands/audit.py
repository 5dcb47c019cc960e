"""`minruntime audit UID`: the whole story of a podgroup, as a table, JSON or a picture.

The story comes from ``minruntime.audit.timeline`` (what ``--json`` prints, field for field);
this module renders it: a table of the events with the state and protection window right
after each, a table of the runs, and with ``--plot`` the timeline picture
(``minruntime.audit.timeline_plot``).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

from minruntime.audit.timeline import podgroup_story
from minruntime.audit.timeline_model import Row, Run, Story, Window
from minruntime.audit.timeline_plot import plot_format, write_plot
from minruntime.commands.common import Json, Uid, option, units
from minruntime.commands.render import print_json, rfc3339, wide_console
from minruntime.core import format_duration

Plot = Annotated[
    Path | None,
    option(
        "--plot",
        metavar="FILE",
        help="Also draw the timeline: FILE.png or FILE.svg.",
    ),
]

# Wide enough that a piped table is not wrapped; a terminal keeps its own width.
_PIPE_WIDTH: Final = 220
_OUTCOME_STYLES: Final = {
    "committed": "green",
    "rolled_back": "yellow",
    "skipped": "dim",
    "abandoned": "red",
}


def audit_command(uid: Uid, as_json: Json = False, plot: Plot = None) -> None:
    """The whole story of a podgroup: events, runs, protection windows, nominations, decisions."""
    if plot is not None:
        plot_format(plot)  # a bad suffix fails before the replay, not after
    with units() as made:
        story = podgroup_story(made, uid)
    if as_json:
        print_json(story_json(story))
    else:
        console = wide_console(_PIPE_WIDTH)
        render_story(console, story)
    if plot is not None:
        write_plot(story, plot)
        if not as_json:
            console.print(f"timeline written to {plot}")


def story_json(story: Story) -> dict[str, Any]:
    """The story as plain data: ``audit --json`` (times RFC3339, durations in seconds)."""
    data = asdict(story)
    for run, plain in zip(story.runs, data["runs"], strict=True):
        plain["protected_until"] = run.protected_until
    return data


def render_story(console: Console, story: Story) -> None:
    """The header, the table of events and the table of runs."""
    console.print(_header(story))
    console.print(_events_table(story.rows))
    if story.runs:
        console.print(_runs_table(story.runs))
    else:
        console.print("It never ran.")


def _header(story: Story) -> Text:
    header = Text()
    header.append(f"podgroup {story.uid}", style="bold")
    if story.name:
        header.append(f"  {story.namespace}/{story.name}")
    details = [
        f"queue {story.queue or '(unknown)'}",
        f"pool {story.node_pool}",
        f"priority {story.priority if story.priority is not None else '(unknown)'}",
        f"now {story.status}",
    ]
    header.append("  " + ", ".join(details))
    return header


def _events_table(rows: tuple[Row, ...]) -> Table:
    table = Table(title="Events (state right after each)", title_justify="left")
    for column in ("seq", "time", "event", "what happened", "changed", "status", "pods"):
        table.add_column(column, overflow="fold")
    table.add_column("preempt window after", overflow="fold")
    table.add_column("protected then")
    for row in rows:
        style = _OUTCOME_STYLES.get(row.decision.outcome, "") if row.decision else ""
        if row.kind == "window":
            style = "magenta"
        table.add_row(
            str(row.seq),
            rfc3339(row.time),
            Text(row.type, style=style),
            Text(row.summary, style=style),
            Text("\n".join(_change(c.field, c.before, c.after) for c in row.changes)),
            row.status or "",
            str(row.running_pods),
            Text(_window(row.window)),
            "" if row.window is None else ("yes" if row.window.protected else "no"),
        )
    return table


def _runs_table(runs: tuple[Run, ...]) -> Table:
    table = Table(title="Runs", title_justify="left")
    for column in ("run", "start", "end", "ended by", "ran", "windows", "protected until"):
        table.add_column(column, overflow="fold")
    for run in runs:
        windows = [
            f"{_value(w.min_runtime)} ({_source(w.resolved_from)})"
            + ("" if w.since == run.start else f" from {rfc3339(w.since)}")
            for w in run.windows
        ]
        table.add_row(
            str(run.number),
            rfc3339(run.start),
            rfc3339(run.end) if run.end else "",
            _ended(run),
            _value(run.end - run.start) if run.end else "",
            Text("\n".join(windows)),
            rfc3339(run.protected_until) if run.protected_until else "",
        )
    return table


def _ended(run: Run) -> str:
    """How the run ended; for an attributed eviction, who evicted and the exact verdict."""
    ended = run.ended_by or "still running"
    if run.evictor:
        ended += f" for {run.evictor}"
    if run.evictor_queue:
        ended += f" (queue {run.evictor_queue})"
    if run.exact_verdict is not None:
        cut = run.applied_cut_short
        ended += f"\n{run.exact_verdict}" + (f", cut {_value(cut)} short" if cut else "")
    return ended


def _window(window: Window | None) -> str:
    if window is None:
        return ""
    return (
        f"{_value(window.min_runtime)} ({_source(window.resolved_from)})\n"
        f"until {rfc3339(window.protected_until)}"
    )


def _source(resolved_from: str | None) -> str:
    return f"queue {resolved_from}" if resolved_from else "pool default"


def _change(field: str, before: Any, after: Any) -> str:
    return f"{field.replace('_', ' ')} {_value(before)} → {_value(after)}"


def _value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(map(str, value)) if value else "none"
    return str(value)
