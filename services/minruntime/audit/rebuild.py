"""A replay as an operator asks for it (`minruntime replay`): where from, into what, how.

From the event log (one process, or forked parts split by podgroup: ``audit.parallel``) or from
Kafka's topics (``audit.kafka_log``); into a temporary shadow or one kept under a name; with
``verify``, the end compared with the live state and every stored projection snapshot checked
at its position (``audit.snapshots``). The command parses the options and renders; this module
does the work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import Engine

from minruntime.audit.kafka_log import read_kafka
from minruntime.audit.parallel import PartFailedError, ReplayInParts, default_parts, spare_core
from minruntime.audit.replay import LogEntry, Progress, read_log
from minruntime.audit.snapshots import CheckedReplay, replay_checked, snapshots_in
from minruntime.errors import UserError
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.store import event_log
from minruntime.store.read_transactions import repeatable_read
from minruntime.store.schema import LIVE
from minruntime.store.shadows import create_shadow, drop_shadow, temporary_name

# A progress display for a replay of ``total`` entries: a context that yields the callback.
ProgressDisplay = Callable[[int], AbstractContextManager[Progress]]
EVENT_LOG: Final = "event_log"
KAFKA: Final = "kafka"


@dataclass(frozen=True)
class Rebuild:
    """What to replay: up to ``until``; ``into`` a kept shadow (None: a temporary one);
    ``from_kafka`` rather than the event log; in ``jobs`` parts (None: by the log's size);
    with ``verify``. ``input_topics``: the configured input topics (name -> role), for Kafka."""

    verify: bool = False
    until: datetime | None = None
    into: str | None = None
    from_kafka: bool = False
    jobs: int | None = None
    input_topics: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.verify and self.until is not None:
            raise UserError("--verify compares with the live state now; it cannot take --until")
        if (self.jobs or 1) > 1 and (self.into is not None or self.from_kafka):
            raise UserError(
                "--jobs splits a replay of the event log into temporary shadows; "
                "it cannot take --into or --from-kafka"
            )


@dataclass(frozen=True)
class Rebuilt:
    """What a rebuild did and found; ``schema``: the kept shadow's name (None: dropped)."""

    result: CheckedReplay
    schema: str | None
    source: str
    parts: int


def drop_kept(engine: Engine, name: str) -> bool:
    """Drop the shadow ``name`` kept by an earlier rebuild; False when there is none."""
    with engine.begin() as conn:
        return drop_shadow(conn, name)


def rebuild(
    engine: Engine, settings: Settings, request: Rebuild, display: ProgressDisplay
) -> Rebuilt:
    """Replay as ``request`` says, showing progress with ``display``."""
    total = 0
    if not request.from_kafka:
        with engine.connect() as conn:
            total = event_log.count(conn, LIVE, after=0, until=request.until)
    kept_or_kafka = request.into is not None or request.from_kafka
    parts = 1 if kept_or_kafka else request.jobs or default_parts(total)
    if parts > 1:
        engine.dispose()  # the parts are forked next: nothing of this engine's to inherit
        return Rebuilt(_in_parts(settings, request, parts, total, display), None, EVENT_LOG, parts)
    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, request.into or temporary_name("minruntime_replay"))
        source: Iterable[LogEntry]
        if request.from_kafka:
            entries = _kafka_entries(settings, request)
            source, total = entries, len(entries)
        else:
            source = read_log(conn, until=request.until)
        with display(total) as progress:
            # verify checks every stored projection snapshot when the replay reaches its seq.
            checked = request.verify and not request.from_kafka
            result = replay_checked(
                conn,
                shadow,
                source,
                snapshots_in(conn) if checked else [],
                verify=request.verify,
                progress=progress,
                input_topics=request.input_topics if request.from_kafka else None,
                live_beside=spare_core(1),
            )
        if request.into is not None:
            conn.commit()
    schema = shadow.name if request.into is not None else None
    return Rebuilt(result, schema, KAFKA if request.from_kafka else EVENT_LOG, 1)


def _in_parts(
    settings: Settings, request: Rebuild, parts: int, total: int, display: ProgressDisplay
) -> CheckedReplay:
    try:
        # The parts are forked first, before the progress display starts its thread.
        with (
            ReplayInParts(
                settings.owner_url, parts, verify=request.verify, until=request.until
            ) as split,
            display(total) as progress,
        ):
            return split.run(progress)
    except PartFailedError as error:
        raise UserError(str(error)) from None


def _kafka_entries(settings: Settings, request: Rebuild) -> list[LogEntry]:
    topics = {
        **(request.input_topics or {}),
        settings.topic_requeue_decisions: "requeue_decisions",
    }
    try:
        return read_kafka(kafka_access(settings), topics, until=request.until)
    except OSError as error:
        raise UserError(f"cannot read Kafka at {settings.kafka_bootstrap}: {error}") from None
