"""The one failure policy for applying a Kafka batch to PostgreSQL.

- Bad input never reaches here as an exception: `apply_batch` dead-letters it inside the
  batch's transaction, and `apply_isolated` dead-letters a record that fails for good (a value
  PostgreSQL refuses) by bisecting its batch (`minruntime.ingest.isolation`).
- A transient storage error (connection lost, server stopped or restarting, deadlock,
  serialization failure) is retried FOREVER, with exponential backoff capped at ~10 s: the
  batch is applied in a fresh transaction each time, and offsets stored with it make a retry
  after a partial failure harmless. Meanwhile the batch is not acknowledged (nothing is lost,
  Kafka keeps the records), readiness reports the outage, and one status line says so at
  most every few seconds. A PostgreSQL outage of any length is ridden out.
- A batch's transaction never waits long for this process: the processor's sink runs on
  ``store.engine.bounded_idle_transactions(engine)``, so a transaction may sit idle (between two
  statements) for at most ``IDLE_TRANSACTION_SECONDS`` (30 s); then PostgreSQL ends it and
  releases its locks. A process frozen or cut off in the middle of a batch (a node
  lost, a stopped container) would otherwise hold the offset rows of its partitions until
  TCP noticed (hours), and the instance that took those partitions over would wait on them
  with every other partition of its batch. When the frozen process resumes, its next
  statement fails as a lost connection, which is retried: the batch then skips what the
  other instance applied.
- Anything else (a programming error, an error that retrying cannot cure) STOPS THE PROCESS
  LOUDLY (`os._exit`): the batched consumer commits a batch's Kafka offsets only after it was
  stored, but the process must not go on without that topic (its lane would stop, the others
  would read on). A supervisor restarts the process, Kafka redelivers from the last committed
  offset, and the database offsets skip what was already applied.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence

import psycopg
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from minruntime.core.topic_life import TopicLife
from minruntime.health import Condition, one_line
from minruntime.health.outage import storage_transient, waiting_status
from minruntime.ingest import BatchOutcome, InboundRecord
from minruntime.ingest.batch import DecodedAhead, decode_ahead
from minruntime.ingest.isolation import BatchOptions, Confirm, apply_isolated
from minruntime.retry import BATCH_FIRST_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, retry
from minruntime.store.engine import IDLE_TRANSACTION_SECONDS
from minruntime.store.failures import sqlstate
from minruntime.store.frozen import end_frozen_sessions

log = logging.getLogger(__name__)

EXIT_STORAGE_UNAVAILABLE = 75  # EX_TEMPFAIL
EXIT_UNEXPECTED = 70  # EX_SOFTWARE


class StorageUnavailableError(RuntimeError):
    """The database refused a batch for a reason that waiting cannot cure."""


class BatchSink:
    """Applies one Kafka batch in one database transaction, riding out storage outages."""

    def __init__(
        self,
        engine: Engine,
        *,
        consumer_group: str,
        topic_roles: Mapping[str, str],
        dead_letter_topic: str,
        first_backoff: float = BATCH_FIRST_BACKOFF_SECONDS,
        max_backoff: float = MAX_BACKOFF_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        storing: Condition | None = None,
        frozen_after: float = IDLE_TRANSACTION_SECONDS,
    ) -> None:
        self._engine = engine
        self._options = BatchOptions(
            consumer_group=consumer_group,
            topic_roles=dict(topic_roles),
            dead_letter_topic=dead_letter_topic,
        )
        self._first_backoff = first_backoff
        self._max_backoff = max_backoff
        self._sleep = sleep
        # How long a writer may wait inside a COPY before a blocked batch ends it (the bound
        # of the engine's transactions: ``bounded_idle_transactions``).
        self._frozen_after = frozen_after
        # Readiness "batches": failing while a batch waits for the database.
        self.storing = storing or Condition(initial=None)

    def _end_frozen_writers(self) -> None:
        """The batch waited its bound for a lock: end writers frozen inside a statement."""
        try:
            with self._engine.begin() as conn:
                ended = end_frozen_sessions(conn, self._frozen_after)
        except (DBAPIError, psycopg.Error) as exc:  # the retry reports the outage, if it is one
            log.info("could not look for frozen writers: %s", one_line(exc))
            return
        if ended:
            log.warning(
                "ended %d database session(s) frozen inside a statement for over %.0f s, "
                "holding rows this batch needs (backend pids %s)",
                len(ended),
                self._frozen_after,
                ", ".join(map(str, ended)),
            )

    def decode(self, records: Sequence[InboundRecord]) -> DecodedAhead:
        """Decode and validate a batch ahead of applying it (no database): the processor does
        it for a topic's next batch while the current one is written (``decode_ahead``)."""
        return decode_ahead(records, self._options.get("topic_roles"))

    def __call__(
        self,
        records: Sequence[InboundRecord],
        topic_lives: Mapping[str, TopicLife] | None = None,
        ahead: DecodedAhead | None = None,
        confirm: Confirm | None = None,
    ) -> BatchOutcome:
        """Apply the batch, retrying transient storage errors for as long as they last.

        ``topic_lives``: see ``apply_batch`` (its TopicLifeChangedError propagates).
        ``confirm``: see ``apply_isolated`` (what it raises propagates).
        ``ahead``: what ``decode`` made of the records, if it was called (each retry uses it).
        """
        what = f"batch of {len(records)} records not stored"

        def waits(exc: Exception) -> None:
            if sqlstate(exc) == LOCK_NOT_AVAILABLE:
                self._end_frozen_writers()
            self.storing.fail(f"{what}: {one_line(exc)}")

        try:
            outcome = retry(
                lambda: apply_isolated(
                    self._engine,
                    records,
                    topic_lives=topic_lives,
                    ahead=ahead,
                    confirm=confirm,
                    **self._options,
                ),
                what=what,
                transient=_storage_transient,
                first=self._first_backoff,
                cap=self._max_backoff,
                outage=waiting_status("PostgreSQL"),
                on_failure=waits,
                reason=lambda exc: f"a batch of {len(records)} records waits: {one_line(exc)}",
                sleep=self._sleep,
            )
        except (DBAPIError, psycopg.Error) as exc:
            raise StorageUnavailableError(f"{what}: {one_line(exc)}") from exc
        self.storing.ok()
        return outcome


def _storage_transient(exc: Exception) -> bool:
    # The store runs its hot statements on the driver's cursor: psycopg's own errors (a lost
    # connection, a lock timeout) come unwrapped, and are as transient.
    return isinstance(exc, DBAPIError | psycopg.Error) and storage_transient(exc)


LOCK_NOT_AVAILABLE = "55P03"


def stop_loudly(exc: BaseException) -> None:
    """Log why and end the process at once, committing no Kafka offset past the batch."""
    code = EXIT_STORAGE_UNAVAILABLE if isinstance(exc, StorageUnavailableError) else EXIT_UNEXPECTED
    log.critical("stopping the processor (exit %d): %r", code, exc, exc_info=exc)
    logging.shutdown()
    os._exit(code)
