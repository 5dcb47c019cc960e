"""What-if: which running podgroups' protection a queue or configuration change would change.

The change is applied with the service's own projection code (``apply_batch``) to a copy of
the live state inside a transaction that is always rolled back (``asof.live_copy``), and the
copy's read surface is asked before and after: the answer is the one the service would give
after the change, and the live state is never written.

A change is given as events (from files: they replace what they name, exactly as
``queues apply``/``config apply``/``produce`` would) and edits (from flags: the fields not given
keep their current values, so an edit is merged with the row it changes first). Events are
applied first, in order; edits are merged with the state they left.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum
from functools import cached_property
from typing import Any, Final, Literal

from sqlalchemy import Connection, Engine

from minruntime.audit.asof import live_copy
from minruntime.audit.protection import ProtectionRow
from minruntime.core import DEFAULT_NODE_POOL, MinRuntimeError
from minruntime.errors import UserError
from minruntime.events import (
    QUEUES_TOPIC,
    ConfigUpdatedData,
    Event,
    EventType,
    QueueDeletedData,
    QueueUpsertedData,
    encode_event,
    new_event,
)
from minruntime.ingest import InboundRecord, apply_batch
from minruntime.store import read_surface
from minruntime.store.dead_letters import first_dead_letter
from minruntime.store.event_log import logged_ids
from minruntime.store.schema import LIVE, StateTables
from minruntime.store.unit import ReadUnit, Units

WHATIF_GROUP: Final = "minruntime-whatif"
WHATIF_SOURCE: Final = "minruntime-whatif"


class Keep(Enum):
    """A queue field an edit leaves as it is."""

    KEEP = "keep"


KEEP: Final = Keep.KEEP


class WhatIfError(UserError):
    """The change cannot be tried: bad input, or the service would reject it."""


@dataclass(frozen=True)
class ChangeEvent:
    """One event of the change and where it came from (a flag, a file and document)."""

    origin: str
    event: Event


@dataclass(frozen=True)
class QueueEdit:
    """Change some fields of a queue (KEEP: as it is now; None: unset / a root).

    A queue that does not exist yet is created: KEEP then means unset (a root for the parent).
    """

    name: str
    parent: str | Keep | None = KEEP
    preempt_min_runtime: timedelta | Keep | None = KEEP
    reclaim_min_runtime: timedelta | Keep | None = KEEP
    origin: str = ""


@dataclass(frozen=True)
class ConfigEdit:
    """Change some plugin arguments of a node pool (None: as in force for the pool now)."""

    node_pool: str = DEFAULT_NODE_POOL
    default_preempt_min_runtime: timedelta | None = None
    default_reclaim_min_runtime: timedelta | None = None
    reclaim_resolve_method: str | None = None
    origin: str = ""


@dataclass(frozen=True)
class Change:
    """Everything to try: events first (in order), then edits, deletions, configuration."""

    events: Sequence[ChangeEvent] = ()
    queue_edits: Sequence[QueueEdit] = ()
    deleted_queues: Sequence[str] = ()
    config_edits: Sequence[ConfigEdit] = ()

    @property
    def is_empty(self) -> bool:
        return not (self.events or self.queue_edits or self.deleted_queues or self.config_edits)


Effect = Literal["unprotected_now", "protected_now", "longer", "shorter", "same_window"]


@dataclass(frozen=True)
class ProtectionChange:
    """A running podgroup whose protection the change would change."""

    before: ProtectionRow
    after: ProtectionRow

    @property
    def effect(self) -> Effect:
        """What changes for an evictor: protection now, the window, or only its source."""
        if self.before.is_protected and not self.after.is_protected:
            return "unprotected_now"
        if self.after.is_protected and not self.before.is_protected:
            return "protected_now"
        if self.after.min_runtime > self.before.min_runtime:
            return "longer"
        if self.after.min_runtime < self.before.min_runtime:
            return "shorter"
        return "same_window"


@dataclass(frozen=True)
class WhatIfReport:
    """What the change amounts to, and the protection table before and after it."""

    at: datetime
    reclaimer_queue: str | None
    events: list[ChangeEvent]
    before: dict[str, ProtectionRow]
    after: dict[str, ProtectionRow]
    notes: list[str] = field(default_factory=list)

    @property
    def rule(self) -> str:
        return "preempt" if self.reclaimer_queue is None else "reclaim"

    @cached_property
    def changes(self) -> list[ProtectionChange]:
        """The running podgroups whose minimum runtime or its source would change, by uid."""
        rows = ((self.before[uid], self.after[uid]) for uid in sorted(self.before))
        return [
            ProtectionChange(before, after)
            for before, after in rows
            if (before.min_runtime, before.resolved_from)
            != (after.min_runtime, after.resolved_from)
        ]

    def count(self, effect: Effect) -> int:
        """How many podgroups the change affects in this way."""
        return sum(1 for change in self.changes if change.effect == effect)


def whatif(
    engine: Engine, change: Change, *, at: datetime, reclaimer_queue: str | None = None
) -> WhatIfReport:
    """Apply ``change`` to a rolled-back copy of the live state; protection at ``at`` before/after.

    The preempt rule, or the reclaim rule seen by a reclaimer in ``reclaimer_queue``.
    WhatIfError (one line) when an edit makes no sense or the service would reject an event.
    """
    if change.is_empty:
        raise WhatIfError("nothing to try: no queue or configuration change given")
    with live_copy(Units(engine)) as unit:
        before = {row.uid: row for row in unit.protection_rows(at, reclaimer_queue)}
        known_before = reclaimer_queue is None or unit.queue_exists(reclaimer_queue)
        applier = _Applier(unit.connection, unit.state.tables)
        fresh, notes = _not_yet_applied(unit.connection, change.events)
        applier.apply(fresh)
        edited, edit_notes = _edit_events(unit, change, at)
        applier.apply(edited)
        after = {row.uid: row for row in unit.protection_rows(at, reclaimer_queue)}
        if reclaimer_queue is not None:
            known_after = unit.queue_exists(reclaimer_queue)
            notes += _unknown_reclaimer(reclaimer_queue, known_before, known_after)
    notes += edit_notes + applier.notes
    return WhatIfReport(at, reclaimer_queue, applier.applied, before, after, notes)


# -- applying events to the copy -----------------------------------------------------------------


class _Applier:
    """Feeds events to ``apply_batch`` on the copy as the queues topic would, in order."""

    def __init__(self, conn: Connection, tables: StateTables) -> None:
        if tables.is_live:
            raise RuntimeError("whatif applies events to a shadow schema, never the live state")
        self.conn = conn
        self.tables = tables
        self.applied: list[ChangeEvent] = []
        self.notes: list[str] = []
        self.next_offset = 0

    def apply(self, events: Sequence[ChangeEvent]) -> None:
        if not events:
            return
        first = self.next_offset
        records = [
            InboundRecord(
                topic=QUEUES_TOPIC,
                partition=0,
                offset=first + number,
                key=item.event.subject.encode(),
                value=encode_event(item.event),
            )
            for number, item in enumerate(events)
        ]
        self.next_offset += len(records)
        outcome = apply_batch(
            self.conn,
            records,
            consumer_group=WHATIF_GROUP,
            topic_roles={QUEUES_TOPIC: "queues"},
            tables=self.tables,
        )
        if outcome.dead_lettered:
            letter = first_dead_letter(self.conn, self.tables, QUEUES_TOPIC, first)
            assert letter is not None  # dead-lettered in this transaction
            offset, kind, message = letter
            raise WhatIfError(
                f"{events[offset - first].origin}: the service would reject this change "
                f"({kind}): {message}"
            )
        if outcome.duplicate_ids:
            self.notes.append(
                f"{outcome.duplicate_ids} event(s) repeat an event id of the change: "
                "the service applies only the first"
            )
        self.applied.extend(events)


def _not_yet_applied(
    conn: Connection, events: Sequence[ChangeEvent]
) -> tuple[list[ChangeEvent], list[str]]:
    """The events the live service has not applied yet; a note for each one it has."""
    if not events:
        return [], []
    seen = logged_ids(conn, LIVE, {(item.event.source, item.event.id) for item in events})
    fresh = [item for item in events if (item.event.source, item.event.id) not in seen]
    notes = [
        f"{item.origin}: event {item.event.id!r} (source {item.event.source!r}) was applied "
        "already; the service would skip it as a duplicate"
        for item in events
        if (item.event.source, item.event.id) in seen
    ]
    return fresh, notes


def _unknown_reclaimer(queue: str, known_before: bool, known_after: bool) -> list[str]:
    if known_before and known_after:
        return []
    when = {(False, False): "", (True, False): " after the change", (False, True): " before it"}
    return [
        f"reclaimer queue {queue!r} is not in the queue tree{when[known_before, known_after]}: "
        "as in KAI, every podgroup then gets its node pool's defaultReclaimMinRuntime"
    ]


# -- edits (flags) -> events ----------------------------------------------------------------------


def _edit_events(
    unit: ReadUnit, change: Change, at: datetime
) -> tuple[list[ChangeEvent], list[str]]:
    """The events the edits amount to, merged with the copy's current rows; notes on them."""
    events = [_queue_event(unit, edit, at) for edit in change.queue_edits]
    notes = [
        f"{edit.origin or '--queue ' + edit.name}: parent {edit.parent!r} is not a queue: "
        f"{edit.name} is a root until it appears"
        for edit in change.queue_edits
        if isinstance(edit.parent, str) and not unit.queue_exists(edit.parent)
    ]
    for name in change.deleted_queues:
        origin = f"--delete-queue {name}"
        if not unit.queue_exists(name):
            raise WhatIfError(f"{origin}: there is no queue {name!r}")
        data = QueueDeletedData(name=name)
        events.append(ChangeEvent(origin, _event(EventType.QUEUE_DELETED, data, at)))
    events += [_config_event(unit, edit, at) for edit in change.config_edits]
    return events, notes


def _queue_event(unit: ReadUnit, edit: QueueEdit, at: datetime) -> ChangeEvent:
    origin = edit.origin or f"--queue {edit.name}"
    current = read_surface.queue_row(unit.connection, unit.state, edit.name)
    fields = (edit.parent, edit.preempt_min_runtime, edit.reclaim_min_runtime)
    if current is not None and all(value is KEEP for value in fields):
        raise WhatIfError(
            f"{origin}: nothing to change (give --parent, --preempt-min-runtime or "
            "--reclaim-min-runtime)"
        )
    now = current or {}
    data = QueueUpsertedData.model_validate(
        {
            "name": edit.name,
            "parentQueue": _kept(edit.parent, now.get("parent")),
            "preemptMinRuntime": _kept(edit.preempt_min_runtime, now.get("preempt_min_runtime")),
            "reclaimMinRuntime": _kept(edit.reclaim_min_runtime, now.get("reclaim_min_runtime")),
            # An edit keeps the queue in its node pool.
            "nodePool": now.get("node_pool"),
        }
    )
    return ChangeEvent(origin, _event(EventType.QUEUE_UPSERTED, data, at))


def _config_event(unit: ReadUnit, edit: ConfigEdit, at: datetime) -> ChangeEvent:
    origin = edit.origin or f"--node-pool {edit.node_pool}"
    given: dict[str, Any] = {
        "default_preempt_min_runtime": edit.default_preempt_min_runtime,
        "default_reclaim_min_runtime": edit.default_reclaim_min_runtime,
        "reclaim_resolve_method": edit.reclaim_resolve_method,
    }
    try:
        config = replace(
            unit.node_pool_configs().for_pool(edit.node_pool),
            **{name: value for name, value in given.items() if value is not None},
        )
    except MinRuntimeError as error:
        raise WhatIfError(f"{origin}: {error}") from error
    data = ConfigUpdatedData.from_config(edit.node_pool, config)
    return ChangeEvent(origin, _event(EventType.CONFIG_UPDATED, data, at))


def _kept(edited: Any, current: Any) -> Any:
    return current if edited is KEEP else edited


def _event(event_type: EventType, data: Any, at: datetime) -> Event:
    return new_event(str(event_type), data, time=at, source=WHATIF_SOURCE)
