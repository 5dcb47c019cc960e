"""`minruntime simulate`: a window of the event log judged as recorded and under a change.

`-f` files are what `whatif -f` and `apply` take (Queue YAML, a scheduler config or its
ConfigMap, queue/config events), read by the same translation. The work is
``minruntime.audit.simulate`` (read-only); this module parses the options and renders a table,
``--json`` (``audit.simulate_model``) or ``--html FILE`` (``audit.simulate_html``).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Final

from minruntime.audit.parallel import PartFailedError
from minruntime.audit.simulate import simulate
from minruntime.audit.simulate_html import render_page
from minruntime.audit.simulate_model import describe
from minruntime.audit.whatif import WHATIF_SOURCE, ChangeEvent
from minruntime.commands.common import Json, current_settings, engine, option, parse_at
from minruntime.commands.render import aligned, counted, print_json
from minruntime.core import DEFAULT_NODE_POOL
from minruntime.errors import UserError
from minruntime.produce import read_changes

# Flipped decisions the table lists (``--json`` and the page have them all).
SHOWN_FLIPS: Final = 20


def simulate_command(
    since: Annotated[
        str,
        option(
            "--since",
            metavar="T",
            help="The window's start: RFC3339, 'now-DURATION' (now-30d).",
        ),
    ],
    files: Annotated[
        list[str],
        option(
            "--filename",
            "-f",
            metavar="FILE",
            help="The change: Queue YAML, a scheduler config (or its ConfigMap), or "
            "queue/config events, as `whatif -f` takes them. Repeatable.",
        ),
    ],
    until: Annotated[
        str | None,
        option("--until", metavar="T", help="The window's end (default: now)."),
    ] = None,
    queue: Annotated[
        str | None, option("--queue", metavar="QUEUE", help="Only the figures of this queue.")
    ] = None,
    node_pool: Annotated[
        str | None,
        option(
            "--node-pool",
            metavar="POOL",
            help="The node pool -f scheduler configs are for (default: default).",
        ),
    ] = None,
    html: Annotated[
        str | None,
        option("--html", metavar="FILE", help="Also write the report as one HTML page."),
    ] = None,
    jobs: Annotated[
        int | None,
        option(
            "--jobs",
            metavar="N",
            help="Fold the log in N processes, each one part of the podgroups (default: one "
            "per core for a log of 20,000 entries or more).",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Replay a window of the log as recorded and under a change: what it would have cost and
    saved (violations, requeue decisions, protection time). Writes nothing to the state."""
    now = datetime.now(UTC)
    start = parse_at(since, now, option="--since")
    end = parse_at(until, now, option="--until") or now
    assert start is not None
    if not files:
        raise UserError("-f FILE: give the change to simulate")
    pool = node_pool or DEFAULT_NODE_POOL
    read = read_changes(files, pool, now, current_settings(), source=WHATIF_SOURCE)
    change = [ChangeEvent(origin, event) for origin, event in read]
    try:
        report = simulate(engine(), change, since=start, until=end, queue=queue, jobs=jobs)
    except PartFailedError as error:
        raise UserError(str(error)) from None
    data = describe(report)
    if html is not None:
        try:
            Path(html).write_text(render_page(data), encoding="utf-8")
        except OSError as error:
            raise UserError(f"--html {html}: {error.strerror or error}") from None
    if as_json:
        print_json(data)
        return
    sys.stdout.write("\n".join(render(data)) + "\n")


def render(data: dict[str, Any]) -> list[str]:
    """The report for people: what was read, a table per queue, the flips, notes, confidence."""
    log = data["log"]
    lines = [
        f"Simulated {data['since']} .. {data['until']}"
        + (f" (queue {data['queue']})" if data["queue"] else "")
        + f": {log['read']} log entries read, {log['in_window']} in the window, "
        f"{log['skipped']} skipped, {log['dead_letters']} dead-lettered; nothing written",
        f"The change: {counted(len(data['change']), 'event')}",
    ]
    lines += [
        f"  {item['type']} {item['subject']}  [from {item['origin']}]" for item in data["change"]
    ]
    rows = [("total", data["total"]), *data["queues"].items()]
    header = [
        "QUEUE",
        "EVICTED",
        "NEW VIOL d/p",
        "AVOIDED d/p",
        "GPU-H LOST before>after",
        "FLIPS >rb/>skip/>commit",
        "REQUEUE GPU-H saved/added",
        "WAIT ADDED h",
        "PROTECTED longer/shorter",
        "PROT GPU-H before>after",
    ]
    table = [header] + [_cells(name, figures) for name, figures in rows]
    lines += aligned(table)
    flips = data["flips"]
    if flips:
        lines.append(f"Flipped decisions ({len(flips)}):")
        lines += aligned(
            [["AT", "UID", "QUEUE", "RECORDED", "UNDER THE CHANGE", "CONFIDENCE", "GPU-H"]]
            + [
                [
                    flip["at"],
                    flip["uid"],
                    flip["queue"],
                    _outcome(flip["before"], flip["before_reason"]),
                    _outcome(flip["after"], flip["after_reason"]),
                    flip["confidence"],
                    "" if flip["gpu_hours"] is None else f"{flip['gpu_hours']:g}",
                ]
                for flip in flips[:SHOWN_FLIPS]
            ]
        )
        if len(flips) > SHOWN_FLIPS:
            lines.append(f"  ... and {len(flips) - SHOWN_FLIPS} more (--json or --html)")
    lines += [f"note: {note}" for note in data["notes"]]
    lines += [f"skipped: {line}" for line in log["skipped_entries"]]
    lines.append("Confidence:")
    lines += [
        f"  {group}: {item['kind']} — {item['why']}" for group, item in data["confidence"].items()
    ]
    return lines


def _cells(name: str, figures: dict[str, Any]) -> list[str]:
    violations = figures["violations"]
    lost = figures["gpu_hours_lost"]
    flips = figures["flips_from_committed"]
    requeue = figures["requeue_gpu_hours"]
    protection = figures["protection"]
    return [
        name,
        str(violations["evicted_runs"]),
        f"{violations['new']['definite']}/{violations['new']['possible']}",
        f"{violations['avoided']['definite']}/{violations['avoided']['possible']}",
        f"{lost['before']:g}>{lost['after']:g}",
        f"{flips['to_rolled_back']}/{flips['to_skipped']}/"
        f"{figures['flips_to_committed']['to_committed']}",
        f"{requeue['saved']:g}/{requeue['added']:g}",
        f"{figures['wait']['added_hours']:g}",
        f"{protection['longer']}/{protection['shorter']}",
        f"{protection['gpu_hours_before']:g}>{protection['gpu_hours_after']:g}",
    ]


def _outcome(outcome: str, reason: str | None) -> str:
    return outcome if reason is None else f"{outcome} ({reason})"
