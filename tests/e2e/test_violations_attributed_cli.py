"""Attributed evictions through Kafka, the real processor, PostgreSQL and the installed CLI.

Releases as the bridge sends them for a default KAI (the pods deleted, the scheduler's
``eviction`` attribution on the release) go through the processor; `minruntime violations
--json` gives the exact verdicts with the action and the evictor, `minruntime audit` shows who
evicted, and the processor's metrics count evictions by action. The harness proves at the end
that `replay --verify` rebuilds `run_log` equal.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests import cloudevents as ce
from tests.e2e.test_violations_cli import Ended, metric_samples, runs_fixture

pytestmark = pytest.mark.stack


def evicted(
    uid: str, queue: str, seconds: float, action: str, evictor_queue: str
) -> list[dict[str, Any]]:
    """A 2-GPU podgroup of ``queue`` that runs from T0 until KAI evicts it after ``seconds``."""
    release = ce.with_data(
        ce.released(uid, time=ce.at(seconds), reason="deleted"),
        eviction={
            "source": "event",
            "action": action,
            "evictor": "team/urgent",
            "evictorQueue": evictor_queue,
            "at": ce.at(seconds),
        },
    )
    return [
        ce.submitted(uid, queue, ("p0", "p1"), priority=50),
        ce.allocated(uid, ("p0", "p1"), ce.at(0)),
        release,
    ]


EVENTS = [
    # leaf3 reclaims from leaf1 via B: B's 600s, cut 500s short.
    *evicted("far", "leaf1", 100, "reclaim", "leaf3"),
    # leaf2 reclaims from leaf1 via C: leaf1's 0s, honoured.
    *evicted("near", "leaf1", 100, "reclaim", "leaf2"),
    # Consolidation: KAI guards no minimum runtime.
    *evicted("moved", "leaf3", 50, "consolidation", "leaf3"),
]
runs = runs_fixture("va", EVENTS, 3)


def test_violations_json_has_the_exact_verdicts_the_action_and_the_evictor(runs: Ended) -> None:
    report = runs.cli_json("violations")
    counts = ("evicted_runs", "violations", "violated", "honoured", "unguarded", "definite")
    assert {key: report[key] for key in counts} == {
        "evicted_runs": 3,
        "violations": 1,
        "violated": 1,
        "honoured": 1,
        "unguarded": 1,
        "definite": 0,
    }
    rows = {row["uid"]: row for row in report["rows"]}
    far = rows["far"]
    assert (far["ended_by"], far["verdict"], far["cut_short"]) == ("evicted", "violated", 500.0)
    assert (far["eviction"]["action"], far["eviction"]["evictor"]) == ("reclaim", "team/urgent")
    assert (far["applied_rule"]["lca"], far["applied_rule"]["min_runtime"]) == ("B", 600.0)
    assert (rows["near"]["verdict"], rows["near"]["protection"]) == ("honoured", "possible")
    assert (rows["moved"]["verdict"], rows["moved"]["applied_rule"]) == ("unguarded", None)
    table = runs.cli("violations")
    assert table.returncode == 0, table.stderr
    assert "evicted by reclaim for team/urgent (queue leaf3)" in table.stdout


def test_the_audit_shows_who_evicted(runs: Ended) -> None:
    (run,) = runs.cli_json("audit", "far")["runs"]
    assert (run["ended_by"], run["action"], run["evictor"], run["exact_verdict"]) == (
        "evicted by reclaim",
        "reclaim",
        "team/urgent",
        "violated",
    )


def test_the_processor_counts_evictions_by_action(runs: Ended) -> None:
    samples = metric_samples(runs.metrics_port)
    assert samples['minruntime_evictions_total{action="reclaim",verdict="violated"}'] == 1
    assert samples['minruntime_evictions_total{action="reclaim",verdict="honoured"}'] == 1
    assert samples['minruntime_evictions_total{action="consolidation",verdict="unguarded"}'] == 1
    assert samples['minruntime_protection_violations_total{verdict="violated"}'] == 1
    assert samples['minruntime_protection_violations_total{verdict="possible"}'] == 0
    assert samples['minruntime_run_seconds_lost_by_action_total{action="reclaim"}'] == 200
    assert samples['minruntime_run_seconds_lost_count{ended_by="evicted"}'] == 3
