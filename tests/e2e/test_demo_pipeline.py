"""`minruntime demo` drives the real pipeline and the requeue worker, and answers with SQL."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.conftest import run_cli
from tests.e2e.harness import Pipeline

pytestmark = pytest.mark.stack

UID = r"demo-[0-9a-f]{4}"
TIME = r"\d\d:\d\d:\d\d"


def _row(text: str, *cells: str) -> bool:
    pattern = r"│\s*" + r"\s*│\s*".join(cells) + r"\s*│"
    return re.search(pattern, text) is not None


def _metric(text: str, series: str) -> float | None:
    """The value of one metric line as the demo prints it (``series`` is literal)."""
    match = re.search(rf"^\s+{re.escape(series)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_demo_runs_the_pipeline_and_shows_sql_answers(
    stack: StackStatus, settings: Settings, tmp_path: Path
) -> None:
    pipeline = Pipeline(settings, tmp_path, "demo").create()
    try:
        pictures = tmp_path / "pictures"
        result = run_cli(
            "demo", "--width", "200", "--output-dir", str(pictures), env=pipeline.env, timeout=300
        )
        assert result.returncode == 0, result.stderr
        out = result.stdout
        assert "FROM minruntime.reclaim_protection('leaf1')" in out  # the query is shown
        # Reclaim from leaf1: a leaf3 job is protected by D's 60s; preempt: B's 10m.
        assert _row(out, f"{UID}-train-a", "leaf3", "1m", "D"), out
        assert _row(out, f"{UID}-train-a", "leaf3", "10m", "B"), out
        # The elastic job (4 pods, minAvailable 2) may lose 2 pods while protected.
        assert _row(out, f"{UID}-elastic", "leaf2", "10m", "B", r"\S+", "true", "2"), out
        assert _row(out, r"kai\.queues\.\S+", "bad_duration", r".*1h-30m.*"), out
        assert pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters") == 1

        _assert_requeue_decisions(out, pipeline)
        _assert_decision_events(out, pipeline)
        _assert_worker_metrics(out)
        _assert_seed_manifests(out, pipeline)
        _assert_audit_part(out, pictures)
        _assert_layers_part(out, pipeline)

        # The demo's own processors and workers (parts 2-3, then 5) are not left running.
        pids = re.findall(r"Started `minruntime (processor|requeue-worker)` \(pid (\d+)", out)
        assert [command for command, _ in pids] == ["processor", "requeue-worker"] * 2, out
        assert not [pid for _, pid in pids if _alive_demo_child(int(pid))]
    finally:
        pipeline.drop()


def _assert_seed_manifests(out: str, pipeline: Pipeline) -> None:
    """The seed's Queue YAML and scheduler config, applied with the CLI, are in force."""
    assert "$ minruntime queues apply -f schemas/examples/queue.production.yaml" in out
    assert "$ minruntime config apply -f schemas/examples/scheduler-config.yaml" in out
    assert pipeline.query(
        "SELECT preempt_min_runtime, reclaim_min_runtime FROM minruntime.queues"
        " WHERE name = 'production'"
    ) == [(timedelta(seconds=20), timedelta(seconds=30))]
    assert pipeline.query(
        "SELECT default_preempt_min_runtime, default_reclaim_min_runtime, reclaim_resolve_method"
        " FROM minruntime.node_pool_configs WHERE node_pool = 'default'"
    ) == [(timedelta(minutes=10), timedelta(minutes=10), "lca")]
    assert _row(out, f"{UID}-serve", "production", "20s", "production", TIME, "false"), out


def _assert_audit_part(out: str, pictures: Path) -> None:
    """explain, whatif, audit with its picture, and replay --verify, as an operator runs them."""
    part = out[out.index("Part 4") :]
    assert re.search(r"verdict\s+PROTECTED until \S+ \(1h5\dm\d+s left\)", part), part
    assert re.search(r"walk starts at\s+leaf2: one step below the lowest common ancestor C", part)
    assert re.search(r"elastic\s+yes: may lose 2 pods now", part), part
    assert re.search(rf"{UID}-protected\s+longrun\s+4h .* 1h .* unprotected now", part), part
    assert "requeue.committed" in part
    svg = list(pictures.glob("demo-*-contended.svg"))
    assert len(svg) == 1, part
    assert svg[0].read_text().lstrip().startswith(("<?xml", "<svg"))
    assert "verify: the live state is exactly what the event log implies" in part
    # The simulation of longrun at 1h over the demo's log: the rollback of the protected job
    # would have committed (an estimate), and the report is next to the timeline picture.
    assert re.search(
        rf"{UID}-protected\s+longrun\s+rolled_back \(protected\)\s+committed\s+estimate", part
    ), part
    page = list(pictures.glob("demo-*-simulation.html"))
    assert len(page) == 1, part
    assert page[0].read_text().startswith("<!DOCTYPE html>")


def _assert_layers_part(out: str, pipeline: Pipeline) -> None:
    """Part 5: a beneficiary's preemption delay, a semi-preemptible gang, a cap, a violation."""
    part = out[out.index("Part 5") :]
    layers = r"layers-[0-9a-f]{4}"
    decided = pipeline.query(
        "SELECT uid, outcome, reason, delay_ends_at IS NOT NULL"
        " FROM minruntime.requeue_decisions WHERE uid LIKE 'layers-%' ORDER BY seq"
    )
    assert sorted((re.sub(layers, "layers", u), o, r, d) for u, o, r, d in decided) == [
        ("layers-hog", "rolled_back", "preemption_delay", True),
        ("layers-repeat", "committed", None, False),
        ("layers-repeat", "skipped", "requeue_limit", False),
    ], decided
    assert _row(part, f"{layers}-hog", "rolled_back", "preemption_delay", r"\{\}", TIME), part
    assert _row(part, f"{layers}-repeat", "skipped", "requeue_limit", r"\{\}", "NULL"), part
    # Semi-preemptible: a gang of 4 with a core of 2, unprotected, may lose its 2 extra pods.
    assert _row(part, f"{layers}-core", "semi-preemptible", "4", "false", "2"), part
    # The dry run says why the nominator skips it, and writes nothing.
    plan = part[part.index("$ minruntime requeue plan") :]
    assert "semi_preemptible" in plan, plan
    # The violation: precious, protected 4h by its queue, evicted after 30 minutes.
    violations = part[part.index("$ minruntime violations") :]
    # Definite: its queue and its pool's default protect it against every preemptor.
    assert re.search(rf"{layers}-precious\s+guarded\s+evicted\s+definite\s", violations), violations


def _assert_requeue_decisions(out: str, pipeline: Pipeline) -> None:
    """Committed (contention), rolled back (no contender), rolled back (protected)."""
    assert "FROM minruntime.requeue_decisions" in out
    runs = r"\{expectedruntime\}"
    assert _row(out, f"{UID}-contended", "committed", "NULL", runs, rf"\{{{UID}-urgent\}}", TIME), (
        out
    )
    assert _row(
        out,
        f"{UID}-idle",
        "rolled_back",
        "no_higher_priority_pending",
        runs,
        r"\{\}",
        "NULL",
    ), out
    assert _row(out, f"{UID}-protected", "rolled_back", "protected", runs, r"\{\}", "NULL"), out
    # One row per job, in this order, and nothing else (a repeated rollback is not logged).
    decided = pipeline.query(
        "SELECT uid, outcome, reason FROM minruntime.requeue_decisions"
        " WHERE uid LIKE 'demo-%' ORDER BY seq"
    )
    assert [(re.sub(UID, "demo", u), o, r) for u, o, r in decided] == [
        ("demo-contended", "committed", None),
        ("demo-idle", "rolled_back", "no_higher_priority_pending"),
        ("demo-protected", "rolled_back", "protected"),
    ]
    # Why: the protected job's queue gives it 4h, and it is not elastic (a 4-pod gang).
    assert _row(out, f"{UID}-protected", "longrun", "4h", "longrun", TIME, "true", "0"), out
    # The podgroups view: only the committed job has a cooldown.
    assert _row(out, f"{UID}-contended", "rq-contention", "leaf3", TIME, "1h", TIME), out
    assert _row(out, f"{UID}-idle", "rq-idle", "leaf3", TIME, "1h", "NULL"), out
    assert _row(out, f"{UID}-protected", "rq-protected", "longrun", TIME, "1h", "NULL")


def _assert_decision_events(out: str, pipeline: Pipeline) -> None:
    """The events the demo read from the decisions topic are the ones really published."""
    recorded = pipeline.scalar("SELECT count(*) FROM minruntime.requeue_decisions")
    published = {
        event["id"]: event
        for event in (json.loads(r.value) for r in pipeline.consume("requeue_decisions", recorded))
        if event["subject"].startswith("demo-")  # part 3's; part 5's are layers-*
    }
    assert sorted(e["type"] for e in published.values()) == [
        "requeue.committed",
        "requeue.rolled-back",
        "requeue.rolled-back",
    ]
    for event_id, event in published.items():
        reason = event["data"].get("reason", "NULL")
        assert _row(out, re.escape(event["type"]), event_id, event["subject"], reason), out
    shown = re.search(
        r"^type: requeue\.committed\nid:\s+(\S+)\ndata:\n(\{.*?\n\})$", out, re.M | re.S
    )
    assert shown, out
    event = published[shown.group(1)]
    assert event["type"] == "requeue.committed"
    assert json.loads(shown.group(2)) == event["data"]
    assert re.fullmatch(f"{UID}-contended", event["data"]["uid"])
    assert [re.sub(UID, "demo", b) for b in event["data"]["beneficiaries"]] == ["demo-urgent"]
    assert event["data"]["nominatedBy"] == ["expectedruntime"]
    # The event's id is the decision's id in SQL.
    assert shown.group(1) == pipeline.scalar(
        "SELECT decision_id FROM minruntime.requeue_decisions WHERE outcome = 'committed'"
    )


def _assert_worker_metrics(out: str) -> None:
    """The kai_requeue_* lines of the worker's scrape, without the *_created series."""
    assert re.search(r"curl -s http://127\.0\.0\.1:\d+/metrics", out), out
    assert "_created" not in out.replace("grep -v '_created'", ""), out
    cycles = re.search(r"The worker's metrics \((\d+) cycles so far\)", out)
    assert cycles, out
    plugin = '{plugin="expectedruntime"'
    by = '{nominated_by="expectedruntime"}'
    # Counters count every evaluation: k cycles ran (the page may be read between a cycle's
    # count and its decisions, so k is the cycle count or one less). Cycle 1 nominates all
    # three jobs and commits one; every later cycle skips the committed one (cooldown) and
    # rolls the other two back again; the five unannotated jobs are invalid_duration skips.
    rollbacks = _metric(out, f"kai_requeue_rollbacks_total{by}")
    assert rollbacks is not None, out
    k = int(rollbacks) // 2
    assert rollbacks == 2 * k, out
    assert k in (int(cycles.group(1)), int(cycles.group(1)) - 1), out
    assert k >= 2, out
    assert _metric(out, f"kai_requeue_commits_total{by}") == 1, out
    assert _metric(out, f"kai_requeue_nominations_total{plugin}}}") == 2 * k + 1, out
    skipped = f"kai_requeue_nomination_skipped_total{plugin}"
    assert _metric(out, f'{skipped},reason="cooldown"}}') == k - 1, out
    assert _metric(out, f'{skipped},reason="invalid_duration"}}') == 5 * k, out


def _alive_demo_child(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    return b"minruntime.cli" in cmdline
