"""`minruntime whatif` without a database: flags, files and the text report.

Every error here is raised before the database is touched, so these run without the stack.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from minruntime.audit.protection import ProtectionRow
from minruntime.audit.whatif import ChangeEvent, WhatIfReport
from minruntime.commands.whatif import read_change_files, report_lines
from minruntime.events import new_event
from tests.cloudevents import T0
from tests.unit.test_cli import one_error_line
from tests.unit.test_cluster_mirror import KAI_ZERO

NOW = datetime(2026, 11, 21, 10, 7, tzinfo=UTC)
QUEUES_YAML = """\
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: research}
spec: {reclaimMinRuntime: "10m"}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: vision}
spec: {parentQueue: research, preemptMinRuntime: "90m"}
"""
SCHEDULER_CONFIG = """\
tiers:
- plugins:
  - name: minruntime
    arguments: {defaultPreemptMinRuntime: "10m", reclaimResolveMethod: queue}
"""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "minruntime: error: nothing to try: give --queue NAME with "),
        (
            ["--queue", "a", "--preempt-min-runtime", "5"],
            "minruntime: error: --preempt-min-runtime '5': invalid duration '5': ",
        ),
        (
            ["--queue", "a", "--reclaim-min-runtime", "-5m"],
            "minruntime: error: --reclaim-min-runtime '-5m': invalid duration '-5m': negative",
        ),
        (["--parent", "b"], "minruntime: error: --parent needs --queue NAME"),
        (
            ["--reclaim-min-runtime", "1h"],
            "minruntime: error: --reclaim-min-runtime needs --queue NAME",
        ),
        (
            ["--reclaim-resolve-method", "median"],
            "minruntime: error: --reclaim-resolve-method 'median': must be one of lca, queue",
        ),
        (
            ["--default-preempt-min-runtime", "unset"],
            "minruntime: error: --default-preempt-min-runtime: a node-pool default cannot be unset",
        ),
        (
            ["--default-reclaim-min-runtime", "1h2"],
            "minruntime: error: --default-reclaim-min-runtime '1h2': invalid duration '1h2'",
        ),
        (["--node-pool", "gpu-a"], "minruntime: error: --node-pool gpu-a: give "),
        (["--queue", ""], "minruntime: error: --queue: the queue name must not be empty"),
        (
            ["--queue", "a", "--parent", "b", "--delete-queue", "a"],
            "minruntime: error: --delete-queue a: also given as --queue",
        ),
        (["--queue", "a", "--bogus"], "minruntime: No such option: --bogus"),
    ],
)
def test_bad_flags_are_one_line_naming_the_flag(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert one_error_line(["whatif", *argv], capsys).startswith(expected)


def test_bad_files_are_one_line_naming_the_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = tmp_path / "web.yaml"
    deployment.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n")
    assert one_error_line(["whatif", "-f", str(deployment)], capsys).startswith(
        f'minruntime: error: {deployment} document 1 (Deployment "web"): kind: a Deployment '
        "is not accepted here: `minruntime whatif -f` takes"
    )
    allocation = tmp_path / "alloc.jsonl"
    pods = [{"name": "p", "node": "n"}]
    allocation.write_text(
        json.dumps({"type": "podgroup.allocated", "data": {"uid": "u", "pods": pods}}) + "\n"
    )
    assert one_error_line(["whatif", "-f", str(allocation)], capsys) == (
        f"minruntime: error: {allocation}:1: whatif tries queue and configuration changes "
        "(config.updated, queue.deleted, queue.upserted), not podgroup.allocated"
    )
    bad_queue = tmp_path / "q.yaml"
    bad_queue.write_text(QUEUES_YAML.replace('"90m"', "90"))
    assert "spec.preemptMinRuntime: must be a duration string" in one_error_line(
        ["whatif", "-f", str(bad_queue)], capsys
    )
    assert "cannot read" in one_error_line(["whatif", "-f", str(tmp_path / "missing.yaml")], capsys)


def test_files_become_the_events_apply_and_produce_would_send(tmp_path: Path) -> None:
    (tmp_path / "queues.yaml").write_text(QUEUES_YAML)
    (tmp_path / "scheduler.yaml").write_text(SCHEDULER_CONFIG)
    (tmp_path / "more.jsonl").write_text(
        '{"type": "queue.deleted", "data": {"name": "old"}}\n'
        '{"type": "queue.upserted", "data": {"name": "nlp", "parentQueue": "research"}}\n'
    )
    paths = [str(tmp_path / name) for name in ("queues.yaml", "more.jsonl", "scheduler.yaml")]
    events = read_change_files(paths, "gpu-a", NOW)
    assert [(e.event.type, e.event.subject) for e in events] == [
        ("queue.upserted", "research"),
        ("queue.upserted", "vision"),
        ("queue.deleted", "old"),
        ("queue.upserted", "nlp"),
        ("config.updated", "config/gpu-a"),
    ]
    vision = events[1].event.data.model_dump(mode="json", by_alias=True)
    assert vision == {
        "name": "vision",
        "parentQueue": "research",
        "preemptMinRuntime": "1h30m",
        "reclaimMinRuntime": None,
        # No spec.resources: KAI's zero quota and limit (it schedules nothing in the queue).
        "resources": KAI_ZERO,
    }
    # A hand-written queue.upserted without resources still means an unmanaged queue.
    assert "resources" not in events[3].event.data.model_dump(mode="json", by_alias=True)
    config = events[4].event.data.model_dump(mode="json", by_alias=True)
    assert config["defaultPreemptMinRuntime"] == "10m"
    assert config["defaultReclaimMinRuntime"] == "0s"  # absent: the default, as config apply
    assert events[0].origin.endswith('queues.yaml document 1 (Queue "research")')
    assert events[2].origin.endswith("more.jsonl:1")


def protection(uid: str, minutes: int, source: str | None) -> ProtectionRow:
    until = T0 + timedelta(minutes=minutes)
    return ProtectionRow(
        uid=uid,
        queue="leaf",
        node_pool="gpu-a",
        start_time=T0,
        min_runtime=timedelta(minutes=minutes),
        resolved_from=source,
        protected_until=until,
        is_protected=until > NOW,
        evictable_pods=0 if until > NOW else 2,
    )


def test_the_text_report() -> None:
    event = new_event(
        "queue.upserted",
        {"name": "leaf", "parentQueue": "C", "preemptMinRuntime": "30m"},
        time=NOW,
    )
    report = WhatIfReport(
        at=NOW,
        reclaimer_queue=None,
        events=[ChangeEvent("--queue leaf", event)],
        before={"a": protection("a", 10, "B"), "b": protection("b", 5, "leaf")},
        after={"a": protection("a", 5, None), "b": protection("b", 30, "leaf")},
    )
    assert report_lines(report) == [
        "The change: 1 event, tried on a copy of the live state (rolled back; nothing is written)",
        "  queue.upserted leaf parentQueue=C preemptMinRuntime=30m reclaimMinRuntime=unset"
        "  [from --queue leaf]",
        "Preempt protection at 2026-11-21T10:07:00Z:",
        "UID  QUEUE  BEFORE  FROM  UNTIL                 NOW        AFTER  FROM                "
        "       UNTIL                 NOW        EFFECT",
        "a    leaf   10m     B     2026-11-21T10:10:00Z  protected  5m     default (node pool "
        "gpu-a)  2026-11-21T10:05:00Z  no         unprotected now",
        "b    leaf   5m      leaf  2026-11-21T10:05:00Z  no         30m    leaf                "
        "       2026-11-21T10:30:00Z  protected  protected now",
        "2 of 2 running podgroups change; 1 becomes unprotected now, 1 becomes protected now.",
    ]
    unchanged = WhatIfReport(NOW, "q", [], report.before, report.before)
    assert report_lines(unchanged)[-1] == (
        "No running podgroup's reclaim protection against a reclaimer in queue q changes "
        "(2 running podgroups)."
    )
