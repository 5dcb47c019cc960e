"""Runs and protection violations through PostgreSQL (SEMANTICS.md §10; docs/storage.md, Runs).

Events go through ``apply_batch`` as the processor applies them; the runs they end are read
back from the read surface (``minruntime.runs``, as the reader role) and by
``minruntime.audit.violations``; replays (one process and in parts) rebuild them equal; the
migration that made the table fills it from an older log; a run's windows are the ones in
force at its end, also while another batch changes the tree at that very moment.
"""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy as sa

from minruntime.audit.parallel import ReplayInParts
from minruntime.audit.replay import read_log, replay
from minruntime.audit.timeline import podgroup_story
from minruntime.audit.timeline_plot import write_plot
from minruntime.audit.verify import compare
from minruntime.audit.violations import find_violations
from minruntime.core import Verdict
from minruntime.errors import UserError
from minruntime.ingest import apply_batch
from minruntime.store.migrate import downgrade, upgrade
from minruntime.store.read_transactions import repeatable_read
from minruntime.store.shadows import create_shadow
from minruntime.store.unit import ReadUnit, State, Units
from tests.cloudevents import (
    T0,
    allocated,
    config,
    deleted,
    design_tree,
    queue,
    released,
    submitted,
)
from tests.integration.helpers import GROUP, Feed, execute, live_violations, rows, s


def run_once(feed: Feed, uid: str, queue_name: str, seconds: float, reason: str | None) -> None:
    """A podgroup of two 1-GPU pods in ``queue_name`` that runs from T0 for ``seconds``."""
    feed.send(submitted(uid, queue_name, 2), allocated(uid, 2, time=T0))
    feed.send(released(uid, time=T0 + s(seconds), reason=reason))


def story(feed: Feed) -> None:
    """The design tree (preempt B 600s, leaf1 300s; reclaim B 600s, D 60s, leaf1 0s, leaf2
    180s), reclaim default 120s, and runs that end in every way."""
    feed.send(*design_tree(), config(defaultReclaimMinRuntime="120s"))
    # leaf3's windows: preempt 600 (B); via A 600 (B); via B 60 (D); via D 60 (D); unknown 120.
    run_once(feed, "def", "leaf3", 50, "evicted")  # inside all of them: definite
    run_once(feed, "late", "leaf3", 900, "evicted")  # outside all: not a violation
    run_once(feed, "done", "leaf3", 50, "completed")  # inside, but no eviction
    # leaf1's: preempt 300 (leaf1); via A 600 (B); via B 600 (B); via C 0 (leaf1); unknown 120.
    run_once(feed, "pos", "leaf1", 100, "evicted")  # inside some: possible
    # leaf2's: preempt 600; via A 600; via B 600; via C 180 (leaf2); unknown 120.
    run_once(feed, "req", "leaf2", 150, "requeued")
    feed.send(submitted("gone", "leaf3", 2), allocated("gone", 2, time=T0))
    feed.send(deleted("gone", time=T0 + s(10)))


@pytest.fixture
def feed(engine: sa.Engine) -> Feed:
    fed = Feed(engine)
    story(fed)
    return fed


def runs(engine: sa.Engine) -> dict[str, sa.Row[tuple[object, ...]]]:
    found = rows(engine, "SELECT * FROM minruntime.runs ORDER BY uid")
    return {row.uid: row for row in found}


def test_every_ended_run_is_a_row_of_the_runs_view_for_the_reader(
    feed: Feed, reader: sa.Engine
) -> None:
    seen = runs(reader)
    assert sorted(seen) == ["def", "done", "gone", "late", "pos", "req"]
    done = seen["done"]
    assert (done.queue, done.node_pool, done.preemptibility) == ("leaf3", "default", "preemptible")
    assert (done.run_start, done.run_end, done.ran) == (T0, T0 + s(50), s(50))
    assert (done.ended_by, done.eviction, done.gpus, done.gpu_seconds) == (
        "completed",
        False,
        Decimal("2.000000"),
        Decimal("100.000"),
    )
    assert (done.preempt_min_runtime, done.preempt_resolved_from) == (s(600), "B")
    assert done.preempt_protected_until == T0 + s(600)
    assert (done.shortest_reclaim_min_runtime, done.longest_reclaim_min_runtime) == (s(60), s(600))
    assert (done.protection, done.ended_inside_protection, done.violation) == (
        "definite",
        True,
        None,
    )
    assert done.cut_short == s(550)
    assert [(w["reclaimers"], w["lca"], w["min_runtime"]) for w in done.windows] == [
        ("own-queue", None, 600),
        ("below", "A", 600),
        ("below", "B", 60),
        ("below", "D", 60),
        ("unknown", None, 120),
    ]
    assert (seen["def"].violation, seen["pos"].violation, seen["req"].violation) == (
        "definite",
        "possible",
        "possible",
    )
    assert (seen["late"].protection, seen["late"].violation) == ("none", None)
    assert (seen["gone"].ended_by, seen["gone"].eviction, seen["gone"].protection) == (
        "deleted",
        False,
        "definite",
    )


def test_violations_say_which_rules_protected_the_run_and_by_how_much(
    feed: Feed, engine: sa.Engine
) -> None:
    report = live_violations(engine)
    assert report.evicted_runs == 4
    assert [(v.uid, v.verdict) for v in report.violations] == [
        ("def", Verdict.DEFINITE),
        ("pos", Verdict.POSSIBLE),
        ("req", Verdict.POSSIBLE),
    ]
    pos = report.violations[1]
    assert pos.cut_short == s(500)
    assert [
        (rule.window.reclaimers.value, rule.window.lca, rule.cut_short) for rule in pos.protecting
    ] == [
        ("own-queue", None, s(200)),
        ("below", "A", s(500)),
        ("below", "B", s(500)),
        ("unknown", None, s(20)),
    ]
    assert [rule.protected for rule in pos.rules] == [True, True, True, False, True]
    assert pos.seq is not None
    with repeatable_read(engine) as conn:
        logged = conn.execute(
            sa.text("SELECT type, subject FROM minruntime.event_log WHERE seq = :seq"),
            {"seq": pos.seq},
        ).one()
    assert tuple(logged) == ("podgroup.released", "pos")


def test_violations_since_an_instant_and_of_one_queue(feed: Feed, engine: sa.Engine) -> None:
    with repeatable_read(engine) as conn:
        assert [v.uid for v in find_violations(ReadUnit(conn), since=T0 + s(100)).violations] == [
            "pos",
            "req",
        ]
        leaf1 = find_violations(ReadUnit(conn), queue="leaf1")
        assert ([v.uid for v in leaf1.violations], leaf1.evicted_runs) == (["pos"], 1)
        assert find_violations(ReadUnit(conn), queue="D").violations == ()
        with pytest.raises(UserError, match="no queue of that name"):
            find_violations(ReadUnit(conn), queue="nowhere")


def test_a_replayed_state_kept_as_a_shadow_reports_the_same_violations(
    feed: Feed, engine: sa.Engine
) -> None:
    with repeatable_read(engine) as conn:
        live = find_violations(ReadUnit(conn))
        shadow = create_shadow(conn, "runs_kept")
        replay(conn, read_log(conn), into=shadow.tables)
        kept = find_violations(ReadUnit(conn, State.named("runs_kept")))
        with pytest.raises(UserError, match="--schema nowhere"):
            find_violations(ReadUnit(conn, State.named("nowhere")))
    assert kept == live
    assert [v.seq for v in kept.violations] == [v.seq for v in live.violations]


def test_the_windows_are_the_ones_in_force_at_the_end_not_todays(
    feed: Feed, engine: sa.Engine
) -> None:
    feed.send(submitted("asof", "leaf3", 1), allocated("asof", 1, time=T0))
    feed.send(queue("D", "B", reclaim="1h"))
    feed.send(released("asof", time=T0 + s(70), reason="evicted"))
    feed.send(queue("D", "B", reclaim="60s"))
    run_once(feed, "after", "leaf3", 70, "evicted")
    seen = runs(engine)
    # With D at 1h at its end, 70s was inside every window; back at 60s, only some.
    assert (seen["asof"].protection, seen["after"].protection) == ("definite", "possible")
    assert [w["min_runtime"] for w in seen["asof"].windows] == [600, 600, 3600, 3600, 120]


def test_later_batches_on_one_connection_store_the_windows_in_force_at_each_end(
    feed: Feed, engine: sa.Engine
) -> None:
    # The windows' JSON is kept on the connection from batch to batch (issue 30): a run of
    # the same queue ending after a configuration change still stores the new windows.
    run_once(feed, "first", "leaf3", 50, "evicted")
    run_once(feed, "again", "leaf3", 50, "evicted")
    feed.send(config(defaultReclaimMinRuntime="300s"))
    run_once(feed, "then", "leaf3", 50, "evicted")
    seen = runs(engine)
    windows = {uid: [w["min_runtime"] for w in seen[uid].windows] for uid in seen}
    assert windows["first"] == windows["again"] == [600, 600, 60, 60, 120]
    assert windows["then"] == [600, 600, 60, 60, 300]


def test_a_replay_rebuilds_the_runs_equal_in_one_process_and_in_parts(
    feed: Feed, engine: sa.Engine, owner_database_url: str
) -> None:
    feed.send(config("default", defaultReclaimMinRuntime="1s"))  # a config change mid-log
    run_once(feed, "later", "leaf1", 5, "evicted")
    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, "runs_replayed")
        replay(conn, read_log(conn), into=shadow.tables)
        checks = {check.table: check for check in compare(conn, shadow)}
    assert checks["run_log"].equal
    assert checks["run_log"].live_rows == 7
    with ReplayInParts(owner_database_url, 3, verify=True) as parts:
        checked = parts.run()
    unequal = [check.table for check in checked.checks if not check.equal]
    assert unequal == []
    assert {check.table: check.live_rows for check in checked.checks}["run_log"] == 7
    # Queue and config entries are applied by every part, counted once.
    assert checked.report.events == feed_events(engine)


def feed_events(engine: sa.Engine) -> int:
    return int(rows(engine, "SELECT count(*) FROM minruntime.event_log")[0][0])


def test_a_run_ending_while_another_batch_changes_the_tree_waits_for_it(
    feed: Feed, engine: sa.Engine, runtime: sa.Engine
) -> None:
    feed.send(submitted("race", "leaf3", 1), allocated("race", 1, time=T0))
    change, end = feed.records(
        queue("D", "B", reclaim="1h"), released("race", time=T0 + s(70), reason="evicted")
    )
    finished = threading.Event()

    def end_the_run() -> None:
        Feed(runtime).apply([end])
        finished.set()

    with runtime.begin() as changing:
        apply_batch(changing, [change], consumer_group=GROUP)
        ender = threading.Thread(target=end_the_run)
        ender.start()
        time.sleep(1.0)
        # The tree change is not committed: the run's end waits for it (the tree lock).
        assert not finished.is_set()
    ender.join(timeout=30)
    assert finished.is_set()
    race = runs(engine)["race"]
    # Logged after the change, and judged with it: D's 1h protected the run.
    assert race.protection == "definite"
    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, "runs_race")
        replay(conn, read_log(conn), into=shadow.tables)
        assert all(check.equal for check in compare(conn, shadow, ["run_log"]))


def test_old_stored_rows_neither_stop_the_projection_nor_the_report(
    feed: Feed, engine: sa.Engine
) -> None:
    execute(
        engine,
        # A running podgroup stored without a start time (an older version's row).
        "INSERT INTO minruntime_state.podgroup_state (uid, status, submitted, running_pods)"
        " VALUES ('old', 'running', false, 1)",
        "INSERT INTO minruntime_state.pod_state (uid, name, subgroup, node, allocated)"
        " VALUES ('old', 'w0', 'default', 'n1', true)",
        # A run whose windows this version cannot read.
        'UPDATE minruntime_state.run_log SET windows = \'[{"rule": "later"}, 7]\''
        " WHERE uid = 'pos'",
    )
    outcome = feed.send(released("old", time=T0 + s(5), reason="evicted"))
    assert (outcome.applied, outcome.dead_lettered) == (1, 0)
    assert "old" not in runs(engine)
    report = live_violations(engine)
    pos = next(v for v in report.violations if v.uid == "pos")
    assert (pos.verdict, pos.cut_short, pos.rules) == (Verdict.POSSIBLE, s(500), ())


def test_the_processor_hands_the_evicted_runs_to_its_metrics(engine: sa.Engine) -> None:
    fed = Feed(engine)
    fed.send(*design_tree())
    fed.send(submitted("m", "leaf3", 2), allocated("m", 2, time=T0))
    outcome = fed.send(released("m", time=T0 + s(30), reason="preempted"))
    assert [
        (r.queue, r.queue_known, r.ended_by, r.seconds, r.gpu_seconds, r.protection)
        for r in outcome.lost_runs
    ] == [("leaf3", True, "preempted", 30.0, 60.0, "possible")]


def test_the_audit_marks_where_a_run_ended_inside_its_window(
    feed: Feed, engine: sa.Engine, tmp_path: Path
) -> None:
    story_of = podgroup_story(Units(engine), "def")
    (run,) = story_of.runs
    assert (run.protection, run.eviction, run.cut_short) == ("definite", True, s(550))
    assert run.ended_inside_protection
    picture = tmp_path / "def.svg"
    write_plot(story_of, picture)
    text = picture.read_text()
    assert "violation (definite), cut 9m10s short" in text
    assert "ended inside its window" in text  # the legend
    late = podgroup_story(Units(engine), "late").runs[0]
    assert (late.protection, late.ended_inside_protection) == ("none", False)
    write_plot(podgroup_story(Units(engine), "late"), tmp_path / "late.svg")
    assert "violation" not in (tmp_path / "late.svg").read_text()


def test_the_migration_fills_the_runs_of_an_older_log(
    scratch: str, scratch_engine: sa.Engine
) -> None:
    story(Feed(scratch_engine))
    query = "SELECT * FROM minruntime.runs ORDER BY uid"
    before = [tuple(row) for row in rows(scratch_engine, query)]
    downgrade(scratch, "0012")
    upgrade(scratch)
    after = [tuple(row) for row in rows(scratch_engine, query)]
    assert len(before) == 6
    assert after == before
