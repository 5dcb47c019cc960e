"""Runs whose eviction the scheduler attributed, through PostgreSQL (docs/audit.md, violations).

Releases carrying ``eviction`` (as the bridge makes them from KAI's ``Evict`` Event, its
last-eviction-timestamp annotation or a pod's DisruptionTarget condition) go through
``apply_batch``; ``minruntime.runs`` (as the reader) and ``minruntime violations`` show who
evicted, the one rule that applied and the exact verdict; a replay rebuilds the same rows;
migration 0018 rebuilds the runs of a log an older processor applied without attributions.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import sqlalchemy as sa
from rich.console import Console

from minruntime.audit.explain import explain
from minruntime.audit.replay import read_log, replay
from minruntime.audit.timeline import podgroup_story
from minruntime.audit.verify import compare
from minruntime.audit.violations import find_violations
from minruntime.commands.explain import render_explanation
from minruntime.commands.violations import render, write_json
from minruntime.core import ExactVerdict, Verdict
from minruntime.store.migrate import downgrade, upgrade
from minruntime.store.read_transactions import repeatable_read
from minruntime.store.shadows import LIVE, create_shadow
from minruntime.store.unit import ReadUnit, State, Units
from tests.cloudevents import (
    T0,
    Event,
    allocated,
    config,
    design_tree,
    released,
    stamp,
    submitted,
    with_data,
)
from tests.integration.helpers import Feed, execute, live_violations, rows, s


def evicted(
    uid: str,
    seconds: float,
    source: str,
    action: str | None = None,
    evictor_queue: str | None = None,
    *,
    at: float | None = None,
    reason: str = "deleted",
) -> Event:
    """The release of ``uid`` at T0 + ``seconds`` as the bridge sends it for a default KAI
    (it deleted the pods: reason ``deleted``), with the scheduler's attribution."""
    eviction: dict[str, Any] = {"source": source}
    if action is not None:
        eviction |= {"action": action, "evictor": "team/urgent"}
    if evictor_queue is not None:
        eviction["evictorQueue"] = evictor_queue
    if at is not None:
        eviction["at"] = stamp(T0 + s(at))
    return with_data(released(uid, time=T0 + s(seconds), reason=reason), eviction=eviction)


def story(feed: Feed) -> None:
    """The design tree (preempt B 600s, leaf1 300s; reclaim B 600s, D 60s, leaf1 0s, leaf2
    180s), reclaim default 120s; runs of two 1-GPU pods from T0, each ended by KAI."""
    feed.send(*design_tree(), config(defaultReclaimMinRuntime="120s"))
    ended = [
        # A preempt in leaf1 decided at 190s (the Event), the pods gone at 200s: 300s (leaf1).
        ("kpre", "leaf1", evicted("kpre", 200, "event", "preempt", "leaf1", at=190)),
        # A reclaim by leaf2: LCA C, the walk from leaf1, its 0s: honoured (today: possible).
        ("krec", "leaf1", evicted("krec", 100, "event", "reclaim", "leaf2", at=100)),
        # A reclaim by leaf3: LCA B, the walk from C (unset), B's 600s: violated.
        ("kfar", "leaf1", evicted("kfar", 100, "event", "reclaim", "leaf3")),
        # A reclaim by a queue not in the tree: the pool's 120s, honoured at 130s.
        ("kout", "leaf2", evicted("kout", 130, "event", "reclaim", "elsewhere")),
        # Consolidation: KAI guards no minimum runtime there.
        ("kcon", "leaf3", evicted("kcon", 50, "event", "consolidation", "leaf3")),
        # The annotation alone: a time, no action: definite over every rule, as before.
        ("kann", "leaf3", evicted("kann", 50, "annotation", at=40)),
    ]
    for uid, queue_name, end in ended:
        feed.send(submitted(uid, queue_name, 2), allocated(uid, 2, time=T0))
        feed.send(end)
    # A plain deletion nothing attributed stays a deletion.
    feed.send(submitted("plain", "leaf3", 2), allocated("plain", 2, time=T0))
    feed.send(released("plain", time=T0 + s(50), reason="deleted"))


@pytest.fixture
def feed(engine: sa.Engine) -> Feed:
    fed = Feed(engine)
    story(fed)
    return fed


def runs(engine: sa.Engine) -> dict[str, Any]:
    return {row.uid: row for row in rows(engine, "SELECT * FROM minruntime.runs ORDER BY uid")}


def test_the_runs_view_shows_who_evicted_and_the_verdict_under_the_rule_that_applied(
    feed: Feed, reader: sa.Engine
) -> None:
    seen = runs(reader)
    kpre = seen["kpre"]
    assert (kpre.ended_by, kpre.eviction) == ("evicted", True)
    assert (kpre.eviction_source, kpre.eviction_action, kpre.evictor, kpre.evictor_queue) == (
        "event",
        "preempt",
        "team/urgent",
        "leaf1",
    )
    assert kpre.evicted_at == T0 + s(190)
    assert (kpre.exact_verdict, kpre.violation) == ("violated", "violated")
    assert (kpre.applied_min_runtime, kpre.applied_protected_until) == (s(300), T0 + s(300))
    # Judged when KAI evicted (190s), not when the pods were gone (200s).
    assert kpre.applied_cut_short == s(110)
    assert kpre.applied_window["rule"] == "preempt"
    assert kpre.applied_window["resolved_from"] == "leaf1"
    # The columns before keep their meaning: every possible preemptor at the run's end.
    assert (kpre.protection, kpre.cut_short) == ("possible", s(400))

    krec = seen["krec"]
    assert (krec.protection, krec.exact_verdict, krec.violation) == ("possible", "honoured", None)
    assert (krec.applied_window["reclaimers"], krec.applied_window["lca"]) == ("below", "C")
    assert (krec.applied_min_runtime, krec.applied_cut_short) == (s(0), None)
    kfar = seen["kfar"]
    assert (kfar.exact_verdict, kfar.applied_min_runtime, kfar.applied_cut_short) == (
        "violated",
        s(600),
        s(500),
    )
    assert kfar.applied_window["lca"] == "B"
    kout = seen["kout"]
    assert (kout.exact_verdict, kout.applied_window["reclaimers"]) == ("honoured", "unknown")
    kcon = seen["kcon"]
    assert (kcon.protection, kcon.exact_verdict, kcon.violation) == ("definite", "unguarded", None)
    assert (kcon.applied_window, kcon.applied_min_runtime) == (None, None)
    kann = seen["kann"]
    assert (kann.ended_by, kann.eviction_source, kann.eviction_action) == (
        "evicted",
        "annotation",
        None,
    )
    assert (kann.exact_verdict, kann.protection, kann.violation) == (None, "definite", "definite")
    plain = seen["plain"]
    assert (plain.ended_by, plain.eviction, plain.eviction_source, plain.exact_verdict) == (
        "deleted",
        False,
        None,
        None,
    )


def test_violations_report_violated_and_honoured_and_list_unguarded_evictions(
    feed: Feed, engine: sa.Engine
) -> None:
    report = live_violations(engine)
    assert report.evicted_runs == 6
    listed = {v.uid: v for v in report.violations}
    # Every attributed run some window still protected is listed, with its exact verdict.
    assert {uid: v.shown_verdict for uid, v in listed.items()} == {
        "kann": "definite",
        "kcon": "unguarded",
        "kfar": "violated",
        "kout": "honoured",
        "kpre": "violated",
        "krec": "honoured",
    }
    assert report.violation_count == 3
    assert (report.count(Verdict.DEFINITE), report.count(ExactVerdict.VIOLATED)) == (1, 2)
    kpre = listed["kpre"]
    assert kpre.exact is not None
    assert (kpre.exact.instant, kpre.exact.cut_short) == (T0 + s(190), s(110))
    assert listed["kann"].inexact is not None

    out = io.StringIO()
    write_json(report, out)
    document = json.loads(out.getvalue())
    assert {key: document[key] for key in ("violations", "definite", "possible", "violated")} == {
        "violations": 3,
        "definite": 1,
        "possible": 0,
        "violated": 2,
    }
    assert (document["honoured"], document["unguarded"]) == (2, 1)
    by_uid = {row["uid"]: row for row in document["rows"]}
    assert by_uid["kpre"]["eviction"] == {
        "source": "event",
        "action": "preempt",
        "evictor": "team/urgent",
        "evictor_queue": "leaf1",
        "at": "2026-11-21T10:03:10Z",
    }
    assert (by_uid["kpre"]["verdict"], by_uid["kpre"]["cut_short"]) == ("violated", 110.0)
    assert by_uid["kpre"]["applied_rule"]["min_runtime"] == 300.0
    assert by_uid["kpre"]["judged_at"] == "2026-11-21T10:03:10Z"
    assert (by_uid["kann"]["inexact"], by_uid["kann"]["applied_rule"]) == ("no-action", None)
    assert by_uid["kcon"]["applied_rule"] is None
    assert by_uid["kcon"]["protection"] == "definite"

    table = render(report).splitlines()
    assert table[0] == (
        "3 protection violations among 6 runs ended by an eviction: 1 definite, 0 possible,"
        " 2 violated (also listed: 2 honoured, 1 unguarded)"
    )
    text = "\n".join(table)
    assert (
        "evicted by preempt for team/urgent (queue leaf1) at 2026-11-21T10:03:10Z [event]" in text
    )
    assert "preempt: 5m (queue leaf1), cut 1m50s short" in text
    assert "reclaim via LCA C: 0s (queue leaf1), honoured" in text
    assert "not guarded by a minimum runtime" in text
    assert "[annotation; no action said: every rule judged]" in text


def test_a_replay_rebuilds_the_attributed_runs_equal(feed: Feed, engine: sa.Engine) -> None:
    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, "attributed_replayed")
        replay(conn, read_log(conn), into=shadow.tables)
        checks = {check.table: check for check in compare(conn, shadow)}
        kept = find_violations(ReadUnit(conn, State.named("attributed_replayed")))
        live = find_violations(ReadUnit(conn))
    assert [table for table, check in checks.items() if not check.equal] == []
    assert kept == live


def test_the_processor_hands_the_action_and_the_exact_verdict_to_its_metrics(
    engine: sa.Engine,
) -> None:
    fed = Feed(engine)
    fed.send(*design_tree())
    fed.send(submitted("m", "leaf1", 2), allocated("m", 2, time=T0))
    outcome = fed.send(evicted("m", 30, "event", "reclaim", "leaf3"))
    assert [(r.ended_by, r.protection, r.action, r.exact_verdict) for r in outcome.lost_runs] == [
        ("evicted", "possible", "reclaim", "violated")
    ]


def test_the_migration_rebuilds_the_runs_an_older_processor_applied_unattributed(
    scratch: str, scratch_engine: sa.Engine
) -> None:
    engine = scratch_engine
    story(Feed(engine))
    query = "SELECT * FROM minruntime.runs ORDER BY uid"
    before = [tuple(row) for row in rows(engine, query)]
    states = "SELECT uid, status, evicted_at FROM minruntime_state.podgroup_state"
    podgroups = sorted(tuple(row) for row in rows(engine, states))
    downgrade(scratch, "0017")
    # What a processor older than 0018 made of the same log: deletions, finished.
    execute(
        engine,
        "UPDATE minruntime_state.run_log SET ended_by = 'deleted', eviction = false"
        " WHERE uid LIKE 'k%'",
        "UPDATE minruntime_state.podgroup_state SET status = 'finished',"
        " evicted_at = NULL WHERE uid LIKE 'k%'",
    )
    upgrade(scratch)
    assert [tuple(row) for row in rows(engine, query)] == before
    assert sorted(tuple(row) for row in rows(engine, states)) == podgroups
    assert {row[1] for row in podgroups if str(row[0]).startswith("k")} == {"pending"}


def test_explain_and_the_audit_show_the_action_and_the_evictor(
    feed: Feed, engine: sa.Engine
) -> None:
    with repeatable_read(engine) as conn:
        kfar = explain(ReadUnit(conn, LIVE), "kfar")
        # As the service had it before it applied the release (applied_at): no eviction yet.
        before = explain(ReadUnit(conn, LIVE), "kfar", T0 + s(50))
        plain = explain(ReadUnit(conn, LIVE), "plain")
    assert before.last_eviction is None
    assert plain.last_eviction is None
    last = kfar.last_eviction
    assert last is not None
    assert (last.action, last.evictor, last.evictor_queue, last.exact_verdict) == (
        "reclaim",
        "team/urgent",
        "leaf3",
        "violated",
    )
    assert (last.applied_min_runtime, last.applied_cut_short) == (s(600), s(500))
    console = Console(width=200, record=True, highlight=False)
    console.print(render_explanation(kfar, as_of=False))
    assert (
        "run 2026-11-21T10:00:00Z → 2026-11-21T10:01:40Z by reclaim for team/urgent"
        " (queue leaf3) [event]: violated, cut 8m20s short (its window 10m)"
    ) in console.export_text()

    (run,) = podgroup_story(Units(engine), "kpre").runs
    assert (run.ended_by, run.action, run.evictor, run.evictor_queue) == (
        "evicted by preempt",
        "preempt",
        "team/urgent",
        "leaf1",
    )
    assert (run.exact_verdict, run.applied_cut_short, run.protection) == (
        "violated",
        s(110),
        "possible",
    )
    (plain_run,) = podgroup_story(Units(engine), "plain").runs
    assert (plain_run.ended_by, plain_run.exact_verdict) == ("released (deleted)", None)
