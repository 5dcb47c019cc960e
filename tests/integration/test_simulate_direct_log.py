"""The simulate benchmark's direct log (``benchmarks/direct_log.py``) is the processor's.

``bench_simulate --direct`` writes the generated trace straight into the event log, without
the projections, to build 10M entries in minutes. Its figures stand for the CLI's on a real
log only if that log is what the processor writes: the same trace (seed 20261121, with
evictions) is applied with ``apply_batch`` in the processor's batches into this session's
database, and written directly into a second scratch database; the two event logs are equal
row for row (everything but ``seq`` and ``applied_at``, in ``seq`` order), and ``simulate``
reports the same over both, in one part and in two.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.audit.simulate import simulate
from minruntime.audit.simulate_model import describe
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.migrate import upgrade
from minruntime_dev.scratch import (
    create_scratch_database,
    drop_scratch_database,
    scratch_owner_url,
)
from minruntime_dev.stack import StackStatus

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
_LOGGED = (
    'SELECT topic, "partition", "offset", event_id, source, type, subject, event_time, payload'
    " FROM minruntime_state.event_log ORDER BY seq"
)


@pytest.fixture
def direct_engine(settings: Settings, stack: StackStatus) -> Iterator[sa.Engine]:
    """A second scratch database, migrated to head, for the direct log."""
    url = create_scratch_database(settings)
    try:
        owner = scratch_owner_url(settings, url)
        upgrade(owner)
        engine = engine_from(owner)
        yield engine
        engine.dispose()
    finally:
        drop_scratch_database(settings, url)


def _report(engine: sa.Engine, jobs: int) -> dict[str, Any]:
    """The report of the benchmark's simulation (its change, the whole log), as data."""
    from bench_simulate import SINCE, UNTIL, change

    report = simulate(engine, change(), since=SINCE, until=UNTIL, jobs=jobs)
    described = describe(report)
    del described["seconds"]
    return described


def test_the_direct_log_is_the_processors(
    engine: sa.Engine, direct_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from bench_ingest import generate, trace_events
    from bench_replay import live_apply
    from direct_log import write_direct

    shape = (30, 12, 400)  # queues, nodes, podgroups
    trace = generate(*shape, evicted_share=0.3)
    live_apply(engine, trace.events)
    written = write_direct(
        direct_engine.url.render_as_string(hide_password=False),
        trace_events(*shape, evicted_share=0.3),
    )

    with engine.connect() as conn:
        processed = conn.execute(sa.text(_LOGGED)).all()
    with direct_engine.connect() as conn:
        direct = conn.execute(sa.text(_LOGGED)).all()
    assert written == len(trace.events) == len(processed)
    assert direct == processed
    by_processor = _report(engine, 1)
    # The change makes a difference on this trace: the comparison below is not of empties.
    total = by_processor["total"]
    assert total["protection"]["runs"] > 0
    assert total["violations"]["evicted_runs"] > 0
    assert total["protection"]["shorter"] + total["protection"]["longer"] > 0
    assert _report(direct_engine, 1) == by_processor
    assert _report(direct_engine, 2) == _report(engine, 2) == by_processor
