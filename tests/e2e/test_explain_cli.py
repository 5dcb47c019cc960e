"""`minruntime protection` and `minruntime explain` as a user runs them, against a live pipeline.

Events go to Kafka, the real processor applies them, and the commands run as subprocesses:
the tables, ``--json``, ``--at`` (the state the service had then, after later changes), and
the one-line errors.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from minruntime.core import format_rfc3339
from tests import cloudevents as ce
from tests.conftest import run_cli
from tests.e2e.harness import Pipeline

pytestmark = pytest.mark.stack

HOUR = timedelta(hours=1)


def _cli(pipeline: Pipeline, *argv: str) -> tuple[int, str, str]:
    result = run_cli(*argv, env=pipeline.env)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr


def _json(pipeline: Pipeline, *argv: str) -> Any:
    code, out, err = _cli(pipeline, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _one_error_line(pipeline: Pipeline, *argv: str) -> str:
    code, out, err = _cli(pipeline, *argv)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert out == ""
    return lines[0]


def _history(started: datetime) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Hour-long windows around a start two hours ago: no boundary is near the test's clock."""
    at = format_rfc3339(started)
    queues = [
        ce.queue("A"),
        ce.queue("B", "A", preempt="10h", reclaim="10h"),
        ce.queue("C", "B"),
        ce.queue("leaf1", "C", preempt="5h", reclaim="0s"),
        ce.queue("leaf2", "C", reclaim="3h"),
        ce.queue("D", "B", reclaim="1h"),
        ce.queue("leaf3", "D"),
        ce.config(defaultPreemptMinRuntime="30m"),
    ]
    podgroups = [
        ce.submitted("j1", "leaf1", ["p0", "p1"], priority=50, min_available=2, time=at),
        ce.allocated("j1", ["p0", "p1"], at),
        ce.submitted("j3", "leaf3", ["p0"], priority=50, time=at),
        ce.allocated("j3", ["p0"], at),
        ce.submitted(
            "jE", "leaf2", ["w0", "w1", "w2", "w3"], priority=50, min_available=2, time=at
        ),
        ce.allocated("jE", ["w0", "w1", "w2", "w3"], at),
        ce.submitted("jdone", "leaf2", ["p0"], priority=50, time=at),
        ce.allocated("jdone", ["p0"], at),
        ce.released("jdone", time=format_rfc3339(started + HOUR), reason="completed"),
    ]
    return queues, podgroups


def _without_now(explanation: dict[str, Any]) -> dict[str, Any]:
    """An explanation minus what depends on the instant asked (not on the state)."""
    return {
        **explanation,
        "at": None,
        "verdict": {**explanation["verdict"], "remaining": None},
    }


def test_protection_and_explain_live_and_as_of(pipeline: Pipeline) -> None:
    started = datetime.now(UTC) - 2 * HOUR
    queues, podgroups = _history(started)
    pipeline.produce_events("queues", queues)
    pipeline.produce_events("podgroups", podgroups)
    pipeline.wait_applied(len(queues) + len(podgroups))

    # The table's numbers are the SQL view's.
    rows = {row["uid"]: row for row in _json(pipeline, "protection")}
    assert set(rows) == {"j1", "j3", "jE"}
    view = pipeline.query(
        "SELECT uid, min_runtime, resolved_from, is_protected, evictable_pods"
        " FROM minruntime.preempt_protection"
    )
    for uid, min_runtime, resolved_from, protected, evictable in view:
        row = rows[uid]
        assert row["min_runtime"] == min_runtime.total_seconds()
        assert (row["resolved_from"], row["is_protected"], row["evictable_pods"]) == (
            resolved_from,
            protected,
            evictable,
        )
    assert (rows["j1"]["min_runtime_text"], rows["j1"]["resolved_from"]) == ("5h", "leaf1")
    assert (rows["jE"]["is_protected"], rows["jE"]["evictable_pods"]) == (True, 2)

    code, table, err = _cli(pipeline, "protection")
    assert (code, err) == (0, "")
    assert "preempt rule" in table
    assert "), live" in table
    assert all(uid in table for uid in ("j1", "j3", "jE"))

    reclaim = {
        row["uid"]: row for row in _json(pipeline, "protection", "--reclaimer-queue", "leaf1")
    }
    # leaf1 → leaf3: cousins, D's 1h; the window ended an hour ago.
    assert (reclaim["j3"]["min_runtime_text"], reclaim["j3"]["resolved_from"]) == ("1h", "D")
    assert reclaim["j3"]["is_protected"] is False

    code, out, err = _cli(pipeline, "protection", "--reclaimer-queue", "nowhere")
    assert code == 0
    assert "default (node pool default)" in out
    assert err.splitlines() == [
        "minruntime: note: queue 'nowhere' is not in the queue tree: as in KAI, every "
        "podgroup gets its node pool's defaultReclaimMinRuntime"
    ]

    code, text, err = _cli(pipeline, "explain", "j3", "--preemptor-queue", "leaf1")
    assert (code, err) == (0, "")
    for fragment in (
        "reclaim by a job in queue leaf1: reclaimResolveMethod lca",
        "A → B → D → leaf3",
        "A → B → C → leaf1",
        "D: one step below the lowest common ancestor B, toward the victim",
        "D: 1h  ← applies",
        "1h, from queue D",
        "NOT PROTECTED since",
    ):
        assert fragment in text, text
    code, text, _ = _cli(pipeline, "explain", "j1", "--preemptor-queue", "leaf3")
    assert code == 0
    assert "C: unset" in text
    assert "B: 10h  ← applies" in text
    assert "PROTECTED until" in text

    elastic = _json(pipeline, "explain", "jE")
    assert elastic["rule"]["rule"] == "preempt"
    assert elastic["verdict"]["protected"] is True
    assert elastic["elastic"]["subgroups"] == [
        {"name": "default", "min_available": 2, "pods": 4, "running": 4, "evictable": 2, "core": 0}
    ]
    assert elastic["podgroup"]["preemptibility"] == "preemptible"

    code, text, _ = _cli(pipeline, "explain", "jdone")
    assert code == 0
    assert "NOT PROTECTED: it is not running" in text

    # --at: what the service said then, after the tree, the config and the jobs changed.
    live_table = _json(pipeline, "protection", "--reclaimer-queue", "leaf1")
    live_explain = _json(pipeline, "explain", "j1", "--preemptor-queue", "leaf3")
    before = format_rfc3339(pipeline.scalar("SELECT now()"))
    changes = [
        ce.queue("D", "B", reclaim="6h"),
        ce.queue("B", "A", preempt="1s", reclaim="1s"),
        ce.config(reclaimResolveMethod="queue"),
    ]
    released = [ce.released("j1", time=format_rfc3339(datetime.now(UTC)), reason="completed")]
    pipeline.produce_events("queues", changes)
    pipeline.produce_events("podgroups", released)
    pipeline.wait_applied(len(queues) + len(podgroups) + len(changes) + len(released))

    now_rows = {
        row["uid"]: row for row in _json(pipeline, "protection", "--reclaimer-queue", "leaf1")
    }
    assert "j1" not in now_rows
    assert now_rows["j3"]["min_runtime_text"] == "6h"
    then = _json(pipeline, "protection", "--reclaimer-queue", "leaf1", "--at", before)
    assert then == live_table
    then_explained = _json(pipeline, "explain", "j1", "--preemptor-queue", "leaf3", "--at", before)
    assert then_explained["at"] == before
    assert _without_now(then_explained) == _without_now(live_explain)
    code, text, _ = _cli(pipeline, "explain", "j1", "--at", before)
    assert code == 0
    assert f"at {before}, as the service had it then" in text

    # One-line errors.
    assert _one_error_line(pipeline, "explain", "nope") == (
        "minruntime: error: no podgroup with uid 'nope'"
    )
    assert _one_error_line(pipeline, "explain", "nope", "--at", before) == (
        f"minruntime: error: no podgroup with uid 'nope' at {before}"
    )
    assert "--at 'yesterday'" in _one_error_line(pipeline, "explain", "j1", "--at", "yesterday")
    assert "--at '2026-13-01T00:00:00Z'" in _one_error_line(
        pipeline, "protection", "--at", "2026-13-01T00:00:00Z"
    )


@pytest.mark.parametrize(
    "argv", [("protection",), ("explain", "j1", "--at", "now"), ("protection", "--json")]
)
def test_an_unmigrated_database_is_one_line(unmigrated: str, argv: tuple[str, ...]) -> None:
    result = run_cli(*argv, env={"MINRUNTIME_DATABASE_URL": unmigrated})
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "minruntime: error: the database has no minruntime read surface: run `minruntime migrate`"
    ]
