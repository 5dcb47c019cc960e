"""The one failure policy for applying a Kafka batch to PostgreSQL.

- Bad input never reaches here as an exception: `apply_batch` dead-letters it inside the
  batch's transaction, and `apply_isolated` dead-letters a record that fails for good (a value
  PostgreSQL refuses) by bisecting its batch (`minruntime.ingest.isolation`).
- A storage error (connection lost, deadlock, serialization failure) is retried with
  exponential backoff; the batch is applied in a fresh transaction each time, and offsets
  stored with it make a retry after a partial failure harmless.
- When retries are exhausted, or anything unexpected is raised, the processor STOPS LOUDLY
  (`os._exit`): faust acknowledges a batch in a `finally` even when the loop body raises, so
  letting the exception propagate could commit offsets past records that were never stored.
  A supervisor restarts the process, Kafka redelivers from the last committed offset, and the
  database offsets skip what was already applied.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from minruntime.core.topic_life import TopicLife
from minruntime.ingest import BatchOutcome, InboundRecord
from minruntime.ingest.isolation import apply_isolated

log = logging.getLogger(__name__)

EXIT_STORAGE_UNAVAILABLE = 75  # EX_TEMPFAIL
EXIT_UNEXPECTED = 70  # EX_SOFTWARE


class StorageUnavailableError(RuntimeError):
    """The database did not accept a batch within the retry budget."""


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, OperationalError):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


class BatchSink:
    """Applies one Kafka batch in one database transaction, retrying storage errors."""

    def __init__(
        self,
        engine: Engine,
        *,
        consumer_group: str,
        topic_roles: Mapping[str, str],
        dead_letter_topic: str,
        attempts: int = 8,
        first_backoff: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._engine = engine
        self._group = consumer_group
        self._roles = dict(topic_roles)
        self._dead_letter_topic = dead_letter_topic
        self._attempts = attempts
        self._first_backoff = first_backoff
        self._sleep = sleep

    def __call__(
        self,
        records: Sequence[InboundRecord],
        topic_lives: Mapping[str, TopicLife] | None = None,
    ) -> BatchOutcome:
        """Apply the batch; raise StorageUnavailableError when retries run out.

        ``topic_lives``: see ``apply_batch`` (its TopicLifeChangedError propagates).
        """
        backoff = self._first_backoff
        for attempt in range(1, self._attempts + 1):
            try:
                return apply_isolated(
                    self._engine,
                    records,
                    consumer_group=self._group,
                    topic_roles=self._roles,
                    dead_letter_topic=self._dead_letter_topic,
                    topic_lives=topic_lives,
                )
            except (OperationalError, DBAPIError) as exc:
                if not _transient(exc) or attempt == self._attempts:
                    raise StorageUnavailableError(
                        f"batch of {len(records)} records not stored after {attempt} "
                        f"attempt(s): {exc.__class__.__name__}: {exc.orig or exc}"
                    ) from exc
                log.warning(
                    "storage error on attempt %d/%d, retrying in %.1fs: %s",
                    attempt,
                    self._attempts,
                    backoff,
                    exc.orig or exc,
                )
                self._sleep(backoff)
                backoff = min(backoff * 2, 10.0)
        raise AssertionError("unreachable")


def stop_loudly(exc: BaseException) -> None:
    """Log why and end the process at once, without letting faust commit offsets."""
    code = EXIT_STORAGE_UNAVAILABLE if isinstance(exc, StorageUnavailableError) else EXIT_UNEXPECTED
    log.critical("stopping the processor (exit %d): %r", code, exc, exc_info=exc)
    logging.shutdown()
    os._exit(code)
