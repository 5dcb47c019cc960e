"""No record can stop a partition: a batch that fails for good is split until the culprit is alone.

``apply_isolated`` applies a batch in one transaction, as ``apply_batch`` always did. When the
transaction fails for a reason that retrying cannot cure (``store.failures.is_permanent``: a
value PostgreSQL refuses, an index row too large, a Python ``OverflowError`` ...), the batch is
bisected: each half is applied in its own transaction, with its offsets, and a half that fails
for good is bisected again, down to the single record, which is dead-lettered (kind
``unstorable``, the refusal as its message) in a transaction of its own, with its offset.

Effectively once holds throughout: every transaction stores the next offsets of the records it
covers, so a crash (or a transient error, which propagates to the caller's retry loop) between
two halves makes the retry skip what was already committed. A transient error is never
classified here: it propagates unchanged. Records that are fine cost nothing extra; a failing
batch of n records costs about 2·log2(n) more transactions per culprit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Required, TypedDict, Unpack

from sqlalchemy import Connection, Engine

from minruntime.core.topic_life import TopicLife
from minruntime.ingest.batch import DecodedAhead, apply_batch, dead_letter_alone
from minruntime.ingest.records import BatchOutcome, InboundRecord
from minruntime.store.failures import describe, is_permanent

log = logging.getLogger(__name__)

UNSTORABLE: Final = "unstorable"
"""The dead-letter kind of a record that failed to apply for a reason retrying cannot cure."""

_Apply = Callable[[Connection, Sequence[InboundRecord]], BatchOutcome]
# Called just before a transaction of the batch commits; raises to roll it back.
Confirm = Callable[[], None]


class BatchOptions(TypedDict, total=False):
    """What every part of a batch is applied with (keyword arguments of ``apply_batch``)."""

    consumer_group: Required[str]
    topic_roles: Mapping[str, str] | None
    dead_letter_topic: str


def apply_isolated(
    engine: Engine,
    records: Sequence[InboundRecord],
    *,
    topic_lives: Mapping[str, TopicLife] | None = None,
    ahead: DecodedAhead | None = None,
    confirm: Confirm | None = None,
    **options: Unpack[BatchOptions],
) -> BatchOutcome:
    """Apply ``records`` (transactions of its own); dead-letter any record that fails for good.

    ``ahead``: the records decoded already (``decode_ahead``), for every part of a split too.
    ``confirm``: called in each transaction just before its commit (it may raise, e.g.
    TopicLifeChangedError, to roll the transaction back and propagate).
    Raises what is not permanent (a lost connection, a deadlock, a bug) for the caller to retry
    or to stop on; outcomes of halves committed before such an error are not reported.
    """

    def apply(conn: Connection, part: Sequence[InboundRecord]) -> BatchOutcome:
        return apply_batch(conn, part, topic_lives=topic_lives, ahead=ahead, **options)

    def dead_letter(conn: Connection, record: InboundRecord, message: str) -> BatchOutcome:
        return dead_letter_alone(
            conn, record, UNSTORABLE, message, topic_lives=topic_lives, **options
        )

    outcome = BatchOutcome()
    _apply_or_split(engine, records, apply, dead_letter, outcome, confirm or _nothing)
    return outcome


def _nothing() -> None:
    return None


def _apply_or_split(
    engine: Engine,
    records: Sequence[InboundRecord],
    apply: _Apply,
    dead_letter: Callable[[Connection, InboundRecord, str], BatchOutcome],
    outcome: BatchOutcome,
    confirm: Confirm,
) -> None:
    try:
        with engine.begin() as conn:
            applied = apply(conn, records)
            confirm()
        outcome.add(applied)
        return
    except Exception as error:
        if not is_permanent(error):
            raise
        failure = error
    if len(records) > 1:
        middle = len(records) // 2
        # In order: a partition's records stay in offset order across the two halves.
        _apply_or_split(engine, records[:middle], apply, dead_letter, outcome, confirm)
        _apply_or_split(engine, records[middle:], apply, dead_letter, outcome, confirm)
        return
    record = records[0]
    message = describe(failure)
    log.warning(
        "dead-lettering %s/%d@%d: it cannot be applied (%s)",
        record.topic,
        record.partition,
        record.offset,
        message,
    )
    with engine.begin() as conn:
        letter = dead_letter(conn, record, message)
        confirm()
    outcome.add(letter)
