"""The dead-letter log: the one writer of ``dead_letter_log`` (its outbox rows go through
``store.outbox``) and its reader by position. A record dead-lettered twice (a retried batch)
keeps its first row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.store.schema import StateTables

_DEAD_LETTER: Final = (
    'INSERT INTO minruntime_state.dead_letter_log (topic, partition, "offset", key, value,'
    " key_text, value_text, kind, message, at, headers) VALUES (:topic, :partition, :offset,"
    " :key, :value, :key_text, :value_text, :kind, :message, :at, CAST(:headers AS jsonb))"
    ' ON CONFLICT (topic, partition, "offset") DO NOTHING'
)
_FIRST_FROM: Final = (
    'SELECT "offset", kind, message FROM minruntime_state.dead_letter_log'
    ' WHERE topic = :topic AND "offset" >= :first ORDER BY seq LIMIT 1'
)


def record_dead_letters(
    conn: Connection, tables: StateTables, letters: Sequence[Mapping[str, Any]]
) -> None:
    """Write dead letters (rows keyed by the columns of ``dead_letter_log``; ``headers``, JSON
    text, may be left out: a record without headers)."""
    if letters:
        conn.execute(tables.text(_DEAD_LETTER), [{"headers": None, **row} for row in letters])


def first_dead_letter(
    conn: Connection, tables: StateTables, topic: str, first: int
) -> tuple[int, str, str] | None:
    """(offset, kind, message) of the first dead letter of ``topic`` at ``first`` or later."""
    row = conn.execute(tables.text(_FIRST_FROM), {"topic": topic, "first": first}).first()
    return None if row is None else (int(row[0]), str(row[1]), str(row[2]))
