"""The dead-letter log: the one writer of ``dead_letter_log`` (its outbox rows go through
``store.outbox``). A record dead-lettered twice (a retried batch) keeps its first row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.store.schema import StateTables

_DEAD_LETTER: Final = (
    'INSERT INTO minruntime_state.dead_letter_log (topic, partition, "offset", key, value,'
    " key_text, value_text, kind, message, at) VALUES (:topic, :partition, :offset, :key,"
    " :value, :key_text, :value_text, :kind, :message, :at)"
    ' ON CONFLICT (topic, partition, "offset") DO NOTHING'
)


def record_dead_letters(
    conn: Connection, tables: StateTables, letters: Sequence[Mapping[str, Any]]
) -> None:
    """Write dead letters (rows keyed by the columns of ``dead_letter_log``)."""
    if letters:
        conn.execute(tables.text(_DEAD_LETTER), list(letters))
