"""The generated trace written straight into a database's event log, as the processor logs it.

``apply_batch`` builds a log at about 1,000-2,000 events/s on this machine (it writes every
projection too); a simulation reads nothing but ``minruntime.event_log`` (``audit.simulate``:
the log's span, its committed requeues, ``audit.replay.read_log``) and the dead letters. So
the 10M-event log of ``bench_simulate --direct`` is written here, tens of thousands of entries
a second: each event of ``bench_ingest.trace_events`` is encoded as ``bench_ingest.Trace``
encodes it, consumed as ``bench_replay.live_apply`` hands it to ``apply_batch`` (its role's
default topic, partition 0, offsets in order), decoded by the processor's decoder
(``events.decode_event`` with the default topics' types), made into its row by the
processor's ``ingest.records.event_log_row`` and appended by the store's one writer
(``store.event_log.append``: COPY), ``ROWS_PER_COPY`` at a time, one transaction each. No
projection is written. tests/integration/test_simulate_direct_log.py proves the log equal,
row for row, to the one ``apply_batch`` writes, and the simulation over both the same.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any, Final

from bench_ingest import Trace, TraceEvent
from minruntime.events import DEFAULT_TOPICS, TOPIC_TYPES, decode_event
from minruntime.ingest.records import event_log_row
from minruntime.store import engine_from, event_log
from minruntime.store.schema import LIVE

ROWS_PER_COPY: Final = 50_000
_PROGRESS_ENTRIES: Final = 1_000_000


def write_direct(url: str, events: Iterable[TraceEvent], *, progress: bool = False) -> int:
    """Append ``events`` (in order) to the event log of the database at ``url``; how many."""
    trace = Trace()
    offsets: Counter[str] = Counter()
    engine = engine_from(url, pool_size=1)
    written = 0
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:
        for role, type_, subject, data, at in events:
            _, _, value = trace.encode(role, type_, subject, data, at)
            topic = DEFAULT_TOPICS[role]
            event = decode_event(value, topic, topic_types=TOPIC_TYPES)
            rows.append(event_log_row(event, value, topic, 0, offsets[topic]))
            offsets[topic] += 1
            if len(rows) == ROWS_PER_COPY:
                _append(engine, rows)
                written += len(rows)
                rows = []
                if progress and written % _PROGRESS_ENTRIES == 0:
                    seconds = time.perf_counter() - started
                    print(
                        f"  {written:,} entries in {seconds:.0f} s "
                        f"({written / seconds:,.0f} entries/s)",
                        flush=True,
                    )
        _append(engine, rows)
        written += len(rows)
    finally:
        engine.dispose()
    return written


def _append(engine: Any, rows: list[dict[str, Any]]) -> None:
    with engine.begin() as conn:
        event_log.append(conn, LIVE, rows)
