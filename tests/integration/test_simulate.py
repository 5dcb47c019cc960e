"""`minruntime simulate` against a real log: differences known by construction, nothing written,
no lock waited for.

The log is made as the service makes it: input events through ``apply_batch`` (``Feed``),
decisions through ``apply_decisions`` + ``log_decisions`` (what the worker's transaction and a
replay do). The change is given as the command's own files become (``ChangeEvent``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.audit.simulate import SimulationError, SimulationReport, simulate
from minruntime.audit.simulate_model import describe
from minruntime.audit.whatif import ChangeEvent
from minruntime.core import MinRuntimeConfig
from minruntime.events import (
    ConfigUpdatedData,
    QueueUpsertedData,
    RequeueCommittedData,
    decode_event,
    new_event,
)
from minruntime.ingest import apply_decisions, log_decisions
from minruntime.ingest.records import event_log_row
from minruntime.store import engine_from, event_log
from minruntime.store.schema import LIVE
from tests.cloudevents import T0, allocated, config, queue, released, submitted
from tests.integration.helpers import TOPIC, Feed
from tests.integration.test_requeue_plan import contents, held_by_another_session

H = timedelta(hours=1)
M = timedelta(minutes=1)


def story(engine: sa.Engine, feed: Feed) -> None:
    """Two queues (roots); the default pool protects nothing on its own.

    ``longrun`` protects its runs 4h against everyone; ``short`` 10m against its own queue.
    - ``a`` (longrun, 1 GPU) is preempted after 2h: inside its 4h window (possible: the
      unknown-queue default is 0);
    - ``b`` (longrun, 1 GPU) completes after 3h;
    - ``e`` (short, 2 GPUs) is requeued at 30m for ``f`` (short), which starts at 1h: the
      worker committed (10m had passed); ``e``'s run ends by that requeue at 31m;
    - ``g`` (short, 1 GPU) runs from 0 to the window's end.
    """
    feed.send(
        queue("longrun", preempt="4h", reclaim="4h", time=T0),
        queue("short", preempt="10m", time=T0),
        config(time=T0),
        submitted("a", "longrun", 1, time=T0),
        allocated("a", 1, time=T0),
        submitted("b", "longrun", 1, time=T0),
        allocated("b", 1, time=T0),
        submitted("e", "short", 2, time=T0),
        allocated("e", 2, time=T0),
        submitted("g", "short", 1, time=T0),
        allocated("g", 1, time=T0),
        submitted("f", "short", 1, priority=200, time=T0 + 20 * M),
    )
    commit = new_event(
        "requeue.committed",
        RequeueCommittedData(
            uid="e",
            nominated_by=("expected-runtime",),
            beneficiaries=("f",),
            requeue_not_before=T0 + 40 * M,
            decided_at=T0 + 30 * M,
            run_start=T0,
        ),
        time=T0 + 30 * M,
    )
    with engine.begin() as conn:
        apply_decisions(conn, [commit])
        log_decisions(conn, [commit], topic=TOPIC)
    feed.send(
        released("e", time=T0 + 31 * M),
        allocated("f", 1, time=T0 + H),
        released("a", time=T0 + 2 * H, reason="preempted"),
        released("b", time=T0 + 3 * H, reason="completed"),
    )


def change(*events: tuple[str, Any]) -> list[ChangeEvent]:
    made = []
    for number, (event_type, data) in enumerate(events):
        made.append(
            ChangeEvent(
                f"change.yaml[{number}]",
                new_event(event_type, data, time=datetime.now(UTC), source="minruntime-whatif"),
            )
        )
    return made


def upserted(name: str, **fields: Any) -> tuple[str, Any]:
    return "queue.upserted", QueueUpsertedData.model_validate({"name": name, **fields})


LONGRUN_1H = upserted("longrun", preemptMinRuntime="1h", reclaimMinRuntime="1h")
SHORT_2H = upserted("short", preemptMinRuntime="2h")


def run(engine: sa.Engine, events: Sequence[ChangeEvent], **options: Any) -> SimulationReport:
    options.setdefault("since", T0)
    options.setdefault("until", T0 + 4 * H)
    return simulate(engine, events, **options)


def described(
    engine: sa.Engine, feed: Feed, *events: tuple[str, Any], **options: Any
) -> dict[str, Any]:
    """The story, then the simulation of these changes, as its JSON description."""
    story(engine, feed)
    return describe(run(engine, change(*events), **options))


def test_lowering_longrun_avoids_the_violation_and_shortens_its_protection(
    engine: sa.Engine, feed: Feed
) -> None:
    data = described(engine, feed, LONGRUN_1H)

    longrun = data["queues"]["longrun"]
    assert longrun["violations"]["evicted_runs"] == 1
    assert longrun["violations"]["avoided"] == {"definite": 0, "possible": 1}
    assert longrun["violations"]["new"] == {"definite": 0, "possible": 0}
    # a ran 2h on 1 GPU: 2 GPU-hours lost inside protection, none under the change.
    assert longrun["gpu_hours_lost"] == {"before": 2.0, "after": 0.0}
    # a (2h of 4h) and b (3h of 4h) protected for 1h each under the change.
    assert longrun["protection"]["shorter"] == 2
    assert longrun["protection"]["gpu_hours_before"] == 5.0
    assert longrun["protection"]["gpu_hours_after"] == 2.0
    assert data["queues"]["short"]["protection"]["shorter"] == 0
    assert data["total"]["flips_from_committed"]["to_rolled_back"] == 0
    assert data["rules_differ"] is True


def test_raising_short_flips_the_commit_and_makes_its_eviction_a_violation(
    engine: sa.Engine, feed: Feed
) -> None:
    data = described(engine, feed, SHORT_2H)

    short = data["queues"]["short"]
    assert short["flips_from_committed"] == {
        "decisions": 1,
        "to_rolled_back": 1,
        "to_skipped": 0,
    }
    [flip] = data["flips"]
    assert (flip["uid"], flip["before"], flip["after"], flip["after_reason"]) == (
        "e",
        "committed",
        "rolled_back",
        "protected",
    )
    assert flip["confidence"] == "exact"
    # e: 2 GPUs for 30 minutes; f started 30 minutes after the decision.
    assert flip["gpu_hours"] == 1.0
    assert short["requeue_gpu_hours"]["saved"] == 1.0
    assert short["wait"]["added_hours"] == 0.5
    # e's run, ended by the requeue at 31m, is inside the 2h preempt window now.
    assert short["violations"]["new"] == {"definite": 0, "possible": 1}
    assert data["queues"]["longrun"]["violations"]["avoided"] == {"definite": 0, "possible": 0}


def test_a_change_that_matches_the_log_does_nothing_and_says_so(
    engine: sa.Engine, feed: Feed
) -> None:
    story(engine, feed)

    same = upserted("longrun", preemptMinRuntime="4h", reclaimMinRuntime="4h")
    report = run(engine, change(same))

    assert not report.result.rules_differ
    assert not report.result.total.differs
    assert any("the change does nothing" in note for note in report.notes)


def test_a_pool_default_change_is_judged_as_well(engine: sa.Engine, feed: Feed) -> None:
    story(engine, feed)
    pool = ConfigUpdatedData.from_config(
        "default", MinRuntimeConfig(default_reclaim_min_runtime=timedelta(hours=5))
    )

    data = describe(run(engine, change(("config.updated", pool))))

    # a's unknown-queue reclaim window now protects it too: definite instead of possible.
    assert data["queues"]["longrun"]["violations"]["after"] == {"definite": 1, "possible": 0}


def test_bad_windows_and_empty_logs_are_one_line_errors(engine: sa.Engine, feed: Feed) -> None:
    with pytest.raises(SimulationError, match="the event log is empty"):
        run(engine, change(LONGRUN_1H))
    story(engine, feed)
    with pytest.raises(SimulationError, match="no event in the window"):
        run(engine, change(LONGRUN_1H), since=T0 + 100 * H, until=T0 + 200 * H)
    with pytest.raises(SimulationError, match="is not after"):
        run(engine, change(LONGRUN_1H), since=T0, until=T0)
    with pytest.raises(SimulationError, match="nothing to simulate"):
        run(engine, [])
    with pytest.raises(SimulationError, match="--queue 'nope'"):
        run(engine, change(LONGRUN_1H), queue="nope")


def test_a_window_longer_than_the_log_says_what_is_missing(engine: sa.Engine, feed: Feed) -> None:
    story(engine, feed)

    report = run(engine, change(LONGRUN_1H), since=T0 - 24 * H)

    assert report.missing == (T0 - 24 * H, T0)
    assert any("before the log's first entry" in note for note in report.notes)


def test_one_queue_only(engine: sa.Engine, feed: Feed) -> None:
    data = described(engine, feed, SHORT_2H, queue="longrun")

    assert list(data["queues"]) == ["longrun"]
    assert data["flips"] == []


def test_the_simulation_writes_nothing(engine: sa.Engine, feed: Feed) -> None:
    story(engine, feed)
    before = contents(engine)

    run(engine, change(SHORT_2H))

    assert contents(engine) == before


def test_the_simulation_returns_while_another_session_holds_every_lock(
    engine: sa.Engine, owner_database_url: str, feed: Feed
) -> None:
    story(engine, feed)
    expected = describe(run(engine, change(SHORT_2H)))
    guarded = engine_from(owner_database_url, connect_args={"options": "-c lock_timeout=30s"})
    try:
        with held_by_another_session(engine):
            data = describe(run(guarded, change(SHORT_2H)))
    finally:
        guarded.dispose()

    assert data["queues"] == expected["queues"]
    assert data["flips"] == expected["flips"]


@pytest.mark.parametrize("jobs", [2, 3])
def test_in_parts_the_figures_are_the_same(engine: sa.Engine, feed: Feed, jobs: int) -> None:
    story(engine, feed)
    events = change(SHORT_2H, LONGRUN_1H)
    alone = describe(run(engine, events, jobs=1))

    parted = describe(run(engine, events, jobs=jobs))

    for key in ("total", "queues", "flips", "notes", "log", "rules_differ"):
        assert parted[key] == alone[key], key
    assert alone["total"]["flips_from_committed"]["to_rolled_back"] == 1


def log_refused_entry(engine: sa.Engine, document: dict[str, Any], offset: int) -> int:
    """Append ``document`` (valid on the wire) to the live log as applied, without the core's
    check (what a log an earlier version of the service wrote may hold): its seq."""
    payload = json.dumps(document).encode()
    row = event_log_row(decode_event(payload), payload, "kai.queues", 0, offset)
    with engine.begin() as conn:
        event_log.append(conn, LIVE, [row])
        return int(
            conn.execute(sa.text("SELECT max(seq) FROM minruntime_state.event_log")).scalar_one()
        )


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_entry_the_core_refuses_is_skipped_counted_and_changes_no_figure(
    engine: sa.Engine, feed: Feed, jobs: int
) -> None:
    story(engine, feed)
    events = change(SHORT_2H, LONGRUN_1H)
    clean = describe(run(engine, events, jobs=jobs))
    # A queue that is its own parent: the core refuses it (queue_cycle) in either world.
    seq = log_refused_entry(engine, queue("loop", parent="loop", time=T0 + 2 * H), 1_000)

    report = run(engine, events, jobs=jobs)

    assert report.skipped == 1  # once, though every part folds the queue tree's entries
    [line] = report.skipped_lines
    assert line.startswith(f"seq {seq} (queue.upserted): not applied: queue_cycle: ")
    assert "loop -> loop" in line
    assert any("1 log entry was skipped as a replay skips them" in n for n in report.notes)
    data = describe(report)
    assert data["log"]["skipped"] == 1
    assert data["log"]["skipped_entries"] == [line]
    for key in ("total", "queues", "flips", "rules_differ"):
        assert data[key] == clean[key], key
    # The refused queue is in neither world: asking for it is a one-line error.
    with pytest.raises(SimulationError, match="--queue 'loop'"):
        run(engine, events, queue="loop", jobs=jobs)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_recorded_entry_only_the_changed_world_refuses_keeps_that_worlds_tree(
    engine: sa.Engine, feed: Feed, jobs: int
) -> None:
    """The change puts ``short`` under ``longrun``; the log later puts ``longrun`` under
    ``short``: the recorded world takes it, the changed one would close a cycle."""
    story(engine, feed)
    under = upserted("short", parentQueue="longrun", preemptMinRuntime="10m")
    seq = log_refused_entry(
        engine, queue("longrun", parent="short", preempt="4h", reclaim="4h", time=T0 + H), 1_000
    )

    report = run(engine, change(under), jobs=jobs)

    assert report.skipped == 0, report.skipped_lines  # not refused by the recorded world
    assert any(
        "1 recorded queue event(s) would close a cycle with a queue of the change: the "
        "changed tree kept its shape there" in note
        for note in report.notes
    ), (seq, report.notes)
    # longrun keeps its 4h under the change (the entry changed only its parent), and the
    # recorded world judged it too: a's eviction at 2h is a possible violation in both.
    longrun = describe(report)["queues"]["longrun"]
    assert longrun["violations"]["before"] == longrun["violations"]["after"]
    assert longrun["violations"]["before"] == {"definite": 0, "possible": 1}
