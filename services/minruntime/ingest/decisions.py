"""The requeue-decision projection: what a decision event changes, applied from the event alone.

The requeue worker calls ``record_decisions`` in the transaction that makes its decisions
(projection + event log + outbox); replaying the event log applies the same events through
``apply_decisions``, so the live state and a replayed one cannot drift apart. A decision event
never re-plans anything: it carries its run, its cooldown and its beneficiaries' placements.

What each outcome changes (SEMANTICS.md §8):

- every outcome: one ``requeue_decision_log`` row (the ``requeue_decisions`` view);
- ``requeue.committed`` only: the ``kai.scheduler/requeue-not-before`` annotation and column
  of the podgroup, ``awaiting_release`` while the committed run is still running, and one
  ``requeue_promises`` row per (beneficiary, node), lapsing at ``requeue-not-before``;
- ``requeue.committed`` and ``requeue.skipped`` with reason ``not_running``: the external
  nominations the decision answered (its ``nominatedBy``) are consumed — acted upon, or about
  a podgroup that is not running — so they are not attempted again every cycle. A rollback
  (and a cooldown skip) leaves them standing: the situation may change while the run lasts.

Applying an event twice changes nothing: the decision id is unique.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final, NamedTuple

from sqlalchemy import Connection

from minruntime.core import REQUEUE_NOT_BEFORE_ANNOTATION, format_rfc3339
from minruntime.events import (
    Event,
    EventData,
    RequeueCommittedData,
    RequeueRolledBackData,
    RequeueSkippedData,
    encode_event,
)
from minruntime.ingest.records import event_log_row
from minruntime.store import decisions as stored
from minruntime.store import event_log
from minruntime.store.outbox import enqueue, event_message
from minruntime.store.schema import LIVE, StateTables

DecisionData = RequeueCommittedData | RequeueRolledBackData | RequeueSkippedData

_CONSUMING_REASONS: Final = frozenset({"not_running"})


class _Outcome(NamedTuple):
    """What a decision of one type writes: its ``outcome`` column value, its own columns of
    the decision log row, and whether it consumes the nominations it answered."""

    name: str
    columns: Callable[[Any], dict[str, Any]]
    consumes: Callable[[Any], bool]


def _committed(data: RequeueCommittedData) -> dict[str, Any]:
    return {
        "beneficiaries": list(data.beneficiaries),
        "requeue_not_before": data.requeue_not_before,
        "delay_problem": data.delay_problem,
        "placements": [placement.model_dump(mode="json") for placement in data.placements],
    }


def _rolled_back(data: RequeueRolledBackData) -> dict[str, Any]:
    shares = data.quota_shares
    return {
        "reason": data.reason,
        "delay_ends_at": data.delay_ends_at,
        "quota_shares": None if shares is None else shares.model_dump(mode="json", by_alias=True),
    }


_OUTCOMES: Final[Mapping[type[EventData], _Outcome]] = {
    RequeueCommittedData: _Outcome("committed", _committed, lambda data: True),
    RequeueRolledBackData: _Outcome("rolled_back", _rolled_back, lambda data: False),
    RequeueSkippedData: _Outcome(
        "skipped",
        lambda data: {"reason": data.reason},
        lambda data: data.reason in _CONSUMING_REASONS,
    ),
}
"""Each decision type's outcome (SEMANTICS.md §8: the list at the top of this module)."""


def decision_data(event: Event) -> DecisionData:
    """The typed data of a decision event (TypeError for any other event)."""
    data = event.data
    if not isinstance(data, RequeueCommittedData | RequeueRolledBackData | RequeueSkippedData):
        raise TypeError(f"{event.type} is not a requeue decision")
    return data


def outcome_of(event: Event) -> str:
    """The ``outcome`` column value of a decision event (committed, rolled_back, skipped)."""
    return _OUTCOMES[type(decision_data(event))].name


def apply_decisions(
    conn: Connection, events: Sequence[Event], *, tables: StateTables = LIVE
) -> int:
    """Apply decision events inside the caller's transaction; return how many were new."""
    if not events:
        return 0
    seen = stored.recorded_decision_ids(conn, tables, (event.id for event in events))
    fresh = [event for event in events if event.id not in seen]
    if not fresh:
        return 0
    stored.insert_decisions(conn, tables, [decision_row(event) for event in fresh])
    consumed = [
        {"uid": data.uid, "by": list(data.nominated_by)}
        for data in map(decision_data, fresh)
        if _OUTCOMES[type(data)].consumes(data)
    ]
    stored.consume_nominations(conn, tables, consumed)
    commits = [
        (event, data) for event in fresh if isinstance(data := event.data, RequeueCommittedData)
    ]
    stored.commit_cooldowns(
        conn,
        tables,
        [
            {
                "uid": data.uid,
                "key": REQUEUE_NOT_BEFORE_ANNOTATION,
                "value": format_rfc3339(data.requeue_not_before),
                "not_before": data.requeue_not_before,
                "run_start": data.run_start,
            }
            for _, data in commits
        ],
    )
    stored.insert_promises(
        conn, tables, [row for event, data in commits for row in _promise_rows(event.id, data)]
    )
    return len(fresh)


def record_decisions(conn: Connection, events: Sequence[Event], *, topic: str) -> int:
    """Apply, log and queue for publishing (outbox, to ``topic``) decisions the worker made.

    All in the caller's transaction: a decision exists in the projection exactly when its
    event is in the event log and in the outbox. Returns how many were new.
    """
    seen = {event.id for event in events}
    applied = apply_decisions(conn, events)
    if applied != len(seen):
        raise RuntimeError("a requeue decision id was reused: decisions must be fresh events")
    encoded = log_decisions(conn, events, topic=topic)
    enqueue(conn, LIVE, [event_message(event, topic, payload) for event, payload in encoded])
    return applied


def log_decisions(
    conn: Connection, events: Sequence[Event], *, topic: str, tables: StateTables = LIVE
) -> list[tuple[Event, bytes]]:
    """Append decision events to the event log (no Kafka position: the service made them).

    Returns each event with its encoded bytes (the outbox payload).
    """
    encoded = [(event, encode_event(event)) for event in events]
    rows = [event_log_row(event, payload, topic, None, None) for event, payload in encoded]
    event_log.append(conn, tables, rows)
    return encoded


def decision_row(event: Event) -> dict[str, Any]:
    """The ``requeue_decision_log`` row of a decision event."""
    data = decision_data(event)
    outcome = _OUTCOMES[type(data)]
    return {
        "decision_id": event.id,
        "uid": data.uid,
        "decided_at": data.decided_at,
        "outcome": outcome.name,
        "nominated_by": list(data.nominated_by),
        "run_start": data.run_start,
        "reason": None,
        "beneficiaries": [],
        "requeue_not_before": None,
        "delay_problem": None,
        "placements": [],
        "delay_ends_at": None,
        "quota_shares": None,
        **outcome.columns(data),
    }


def _promise_rows(decision_id: str, data: RequeueCommittedData) -> Iterable[dict[str, Any]]:
    totals: dict[tuple[str, str], Decimal] = {}
    for placement in data.placements:
        key = (placement.podgroup, placement.node)
        totals[key] = totals.get(key, Decimal(0)) + Decimal(str(placement.gpu))
    for (beneficiary, node), gpu in sorted(totals.items()):
        yield {
            "decision_id": decision_id,
            "beneficiary": beneficiary,
            "node": node,
            "victim": data.uid,
            "gpu": gpu,
            "expires_at": data.requeue_not_before,
        }
