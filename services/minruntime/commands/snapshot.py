"""`minruntime snapshot`: copy the live projections at one event-log position, when due."""

from __future__ import annotations

import time
from typing import Annotated, Any, Final

import typer

from minruntime.audit.snapshots import SnapshotPolicy, Taken, take
from minruntime.commands.common import Json, current_settings, option, units
from minruntime.commands.render import print_json

# A stored snapshot's fields `--list` shows, in this order.
_LISTED: Final = ("id", "log_seq", "events", "applied_until", "taken_at")


def snapshot_command(
    force: Annotated[
        bool,
        typer.Option("--force", help="Take one now if the log grew since the newest, due or not."),
    ] = False,
    list_them: Annotated[
        bool, typer.Option("--list", help="List the stored snapshots instead; take none.")
    ] = False,
    every: Annotated[
        float | None,
        option(
            "--every",
            help="Keep running: check every SECONDS whether one is due (one line per snapshot).",
            min=0.1,
        ),
    ] = None,
    prune: Annotated[
        int | None,
        option(
            "--prune",
            help="Remove every snapshot but the newest KEEP instead; take none (owner role).",
            min=1,
            metavar="KEEP",
        ),
    ] = None,
    as_json: Json = False,
) -> None:
    """Snapshot the projections for fast as-of answers when one is due (once, or --every)."""
    if prune is not None:
        _prune(prune, as_json)
        return
    settings = current_settings()
    # The runtime role: it needs rows, not definitions (it may add snapshots, change none).
    with units(settings.database_url) as made:
        if list_them:
            with made.connected() as unit:
                found = unit.snapshots()
            _show([{name: getattr(each, name) for name in _LISTED} for each in found], as_json)
            return
        policy = SnapshotPolicy(
            settings.snapshot_every_events,
            settings.snapshot_every_minutes,
            settings.snapshot_every_bytes,
        )
        taken = take(made, policy, force=force)
        while every is not None:
            if taken.snapshot is not None:
                _report(taken, as_json)
            time.sleep(every)
            taken = take(made, policy)
    _report(taken, as_json)


def _report(taken: Taken, as_json: bool) -> None:
    summary: dict[str, Any] = {
        "taken": taken.snapshot is not None,
        "reason": taken.reason,
        "log_seq": taken.position.seq,
        "events": taken.position.events,
        "id": taken.snapshot.id if taken.snapshot else None,
        "previous_id": taken.previous.id if taken.previous else None,
    }
    if as_json:
        print_json(summary)
    elif taken.snapshot is None:
        print(f"no snapshot taken: {taken.reason} ({taken.position.events:,} log entries)")
    else:
        print(
            f"snapshot #{taken.snapshot.id} at seq {taken.snapshot.log_seq} "
            f"({taken.snapshot.events:,} log entries): {taken.reason}",
            flush=True,
        )


def _prune(keep: int, as_json: bool) -> None:
    # The owner role: the runtime role may add snapshots, never remove one.
    with units() as made, made.write() as unit:
        pruned = unit.prune_snapshots(keep)
    oldest = pruned.kept_from
    if as_json:
        print_json(
            {
                "removed_snapshots": pruned.snapshots,
                "removed_documents": pruned.documents,
                "oldest_kept_id": oldest.id if oldest else None,
                "oldest_kept_log_seq": oldest.log_seq if oldest else None,
            }
        )
    elif oldest is None:
        print("no snapshots")
    else:
        print(
            f"removed {pruned.snapshots} snapshots and {pruned.documents:,} podgroup documents"
            f" they alone used; kept #{oldest.id} (seq {oldest.log_seq}) and every newer one"
        )


def _show(rows: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        print_json(rows)
        return
    if not rows:
        print("no snapshots")
    for row in rows:
        print(
            f"#{row['id']}  seq {row['log_seq']}  {row['events']:,} entries  "
            f"applied until {row['applied_until']:%Y-%m-%dT%H:%M:%S.%fZ}  "
            f"taken {row['taken_at']:%Y-%m-%dT%H:%M:%SZ}"
        )
