"""What a simulation asks of the event log before reading it: its span and the dead letters.

The log keeps every applied event (``event_log``); records the processor could not apply are
in ``dead_letter_log`` instead, with the instant they were dead-lettered.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, NamedTuple

from sqlalchemy import Connection

from minruntime.store.schema import StateTables

_SPAN: Final = "SELECT count(*), min(event_time), max(event_time) FROM minruntime_state.event_log"
_BENEFICIARIES: Final = (
    "SELECT DISTINCT b FROM minruntime_state.event_log,"
    " jsonb_array_elements_text(payload->'data'->'beneficiaries') AS b"
    " WHERE type = 'requeue.committed'"
)
_DEAD_LETTERS: Final = (
    "SELECT count(*) FROM minruntime_state.dead_letter_log WHERE at >= :since AND at <= :until"
)


class LogSpan(NamedTuple):
    """How many entries the log holds and the event times of its first and last."""

    entries: int
    first: datetime | None
    last: datetime | None


def log_span(conn: Connection, tables: StateTables) -> LogSpan:
    """The span of the event log, in the caller's transaction."""
    entries, first, last = conn.execute(tables.text(_SPAN)).one()
    return LogSpan(int(entries), first, last)


def dead_letters_between(
    conn: Connection, tables: StateTables, since: datetime, until: datetime
) -> int:
    """How many records were dead-lettered from ``since`` to ``until``."""
    found = conn.execute(tables.text(_DEAD_LETTERS), {"since": since, "until": until})
    return int(found.scalar_one())


def committed_beneficiaries(conn: Connection, tables: StateTables) -> frozenset[str]:
    """Every podgroup a committed requeue of the log promised capacity to."""
    return frozenset(conn.execute(tables.text(_BENEFICIARIES)).scalars())
