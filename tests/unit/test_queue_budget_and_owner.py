"""A Queue's disruption overrides (its minruntime.kai.scheduler/ annotations) and a PodGroup's
top owner as `queues apply` and the bridge send them: an operator's bad value refused in one
line by `apply`, left out and counted by the bridge; the top owner from KAI's annotation,
else the PodGroup's ownerReference (issue 28, parts 3 and 4)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from minruntime.cluster import mapping
from minruntime.cluster.metrics import EvictionMetrics
from minruntime.cluster.mirror import ADDED, ClusterMirror, Kind, MirrorOptions
from minruntime.core.disruption import (
    EVICTION_WINDOW_ANNOTATION,
    MAX_EVICTIONS_ANNOTATION,
    MIN_EVICTION_GAP_ANNOTATION,
    TOP_OWNER_ANNOTATION,
    DisruptionPolicy,
    queue_policy,
)
from minruntime.events import PodGroupSubmittedData, QueueUpsertedData
from minruntime.kube import ManifestError, parse_manifests, queue_upserts
from tests.unit.test_cluster_mirror import clock, meta, pod, podgroup, queue

KAI_OWNER = "name: train\nuid: js-1\ngroup: jobset.x-k8s.io\nversion: v1alpha2\nkind: JobSet\n"
OWNER_REFERENCE = {
    "apiVersion": "jobset.x-k8s.io/v1alpha2",
    "kind": "JobSet",
    "name": "from-ref",
    "uid": "js-ref",
}


def annotated_queue(annotations: dict[str, str]) -> str:
    lines = "".join(f"    {key}: {value!r}\n" for key, value in annotations.items())
    return (
        "apiVersion: scheduling.run.ai/v2\nkind: Queue\nmetadata:\n  name: team\n"
        f"  annotations:\n{lines}"
    )


def test_queues_apply_carries_valid_overrides_to_the_core_queue() -> None:
    given = {
        MAX_EVICTIONS_ANNOTATION: "3",
        EVICTION_WINDOW_ANNOTATION: "1h",
        MIN_EVICTION_GAP_ANNOTATION: "5m",
        "unrelated.example.com/note": "kept out",
    }
    [upsert] = queue_upserts(parse_manifests("q.yaml", annotated_queue(given)))
    wanted = {key: value for key, value in given.items() if key.startswith("minruntime.")}
    assert upsert.annotations == wanted
    core = upsert.to_queue()
    assert dict(core.disruption) == wanted
    policy = queue_policy(DisruptionPolicy(), dict(core.disruption)).policy
    assert policy == DisruptionPolicy(3, timedelta(hours=1), timedelta(minutes=5))
    # Round trip through the wire.
    again = QueueUpsertedData.model_validate(upsert.model_dump(mode="json", by_alias=True))
    assert again == upsert


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        (MAX_EVICTIONS_ANNOTATION, "0", "from 1 to 100000"),
        (MAX_EVICTIONS_ANNOTATION, "-2", "whole number from 1 to 100000"),
        (MAX_EVICTIONS_ANNOTATION, "99999999999", "whole number from 1 to 100000"),
        (MAX_EVICTIONS_ANNOTATION, "lots", "whole number"),
        (EVICTION_WINDOW_ANNOTATION, "-5m", "negative durations are not allowed"),
        (EVICTION_WINDOW_ANNOTATION, "9999h", "at most 744h"),
        (EVICTION_WINDOW_ANNOTATION, "soon", "invalid duration 'soon'"),
        (MIN_EVICTION_GAP_ANNOTATION, "0s", "must be positive"),
        (MIN_EVICTION_GAP_ANNOTATION, "200h", "at most 168h"),
        (MIN_EVICTION_GAP_ANNOTATION, "1" * 80, "longer than 64"),
    ],
)
def test_queues_apply_refuses_an_override_out_of_bounds_in_one_line(
    key: str, value: str, said: str
) -> None:
    with pytest.raises(ManifestError) as error:
        queue_upserts(parse_manifests("q.yaml", annotated_queue({key: value})))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith('q.yaml document 1 (Queue "team"): metadata.annotations[')
    assert said in message


def test_the_bridge_leaves_a_bad_override_out_counts_it_and_sends_the_queue() -> None:
    registry = CollectorRegistry()
    metrics = EvictionMetrics(registry)
    view = ClusterMirror(MirrorOptions(), clock, ignored=metrics.ignore)
    obj = queue("team", "q-1")
    obj["metadata"]["annotations"] = {
        MAX_EVICTIONS_ANNOTATION: "0",  # refused
        EVICTION_WINDOW_ANNOTATION: "1h",
        MIN_EVICTION_GAP_ANNOTATION: "10m",
    }
    [emission] = view.observe(Kind.QUEUE, ADDED, obj)
    assert isinstance(emission.event.data, QueueUpsertedData)
    assert emission.event.data.annotations == {
        EVICTION_WINDOW_ANNOTATION: "1h",
        MIN_EVICTION_GAP_ANNOTATION: "10m",
    }
    count = registry.get_sample_value(
        "minruntime_kube_bridge_ignored_values_total", {"value": "queue_disruption"}
    )
    assert count == 1.0


def test_a_queue_without_overrides_is_sent_as_before() -> None:
    [emission] = ClusterMirror(MirrorOptions(), clock).observe(Kind.QUEUE, ADDED, queue("t", "q"))
    dumped = emission.event.data.model_dump(mode="json", by_alias=True)
    assert "annotations" not in dumped


def submitted_of(group: dict[str, Any], view: ClusterMirror | None = None) -> dict[str, Any]:
    view = view or ClusterMirror(MirrorOptions(), clock)
    view.observe(Kind.POD_GROUP, ADDED, group)
    [emission] = view.observe(Kind.POD, ADDED, pod("train-0", "p-0"))
    assert isinstance(emission.event.data, PodGroupSubmittedData)
    return emission.event.data.model_dump(mode="json", by_alias=True, exclude_none=True)


def owned(annotations: dict[str, str], references: list[dict[str, Any]]) -> dict[str, Any]:
    group = podgroup(annotations=annotations)
    group["metadata"]["ownerReferences"] = references
    return group


def test_the_top_owner_comes_from_kais_annotation_first() -> None:
    data = submitted_of(owned({TOP_OWNER_ANNOTATION: KAI_OWNER}, [OWNER_REFERENCE]))
    assert data["topOwner"] == {"kind": "JobSet", "name": "train", "uid": "js-1"}


def test_without_the_annotation_the_podgroups_owner_reference_is_the_top_owner() -> None:
    # KAI's podgrouper writes one ownerReference, its top owner, without the controller flag.
    data = submitted_of(owned({}, [OWNER_REFERENCE]))
    assert data["topOwner"] == {"kind": "JobSet", "name": "from-ref", "uid": "js-ref"}
    # Several: the controller one; several and none a controller: no top owner.
    other = {"kind": "ConfigMap", "name": "x", "uid": "cm-1"}
    controller = {**OWNER_REFERENCE, "controller": True}
    assert submitted_of(owned({}, [other, controller]))["topOwner"]["uid"] == "js-ref"
    assert "topOwner" not in submitted_of(owned({}, [other, OWNER_REFERENCE]))
    assert "topOwner" not in submitted_of(podgroup())


@pytest.mark.parametrize(
    "bad",
    ["[not, fields]", "kind JobSet", "x" * 3000, "name: a\nkind: JobSet\n", "{broken json"],
)
def test_unreadable_owner_metadata_is_ignored_counted_and_the_reference_used(bad: str) -> None:
    registry = CollectorRegistry()
    metrics = EvictionMetrics(registry)
    view = ClusterMirror(MirrorOptions(), clock, ignored=metrics.ignore)
    data = submitted_of(owned({TOP_OWNER_ANNOTATION: bad}, [OWNER_REFERENCE]), view)
    assert data["topOwner"]["uid"] == "js-ref"
    count = registry.get_sample_value(
        "minruntime_kube_bridge_ignored_values_total", {"value": "top_owner_metadata"}
    )
    assert count == 1.0


def test_an_owner_reference_beyond_the_wire_bounds_is_not_sent() -> None:
    too_long = {**OWNER_REFERENCE, "name": "n" * 300}
    assert mapping.top_owner(owned({}, [too_long])) is None
    assert mapping.top_owner({"metadata": meta("x", "u", ownerReferences="junk")}) is None


def test_requeue_plan_shows_when_a_budget_skip_frees_up_in_the_table_and_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from minruntime.commands.render import print_json
    from minruntime.commands.requeue_plan import describe, render
    from minruntime.core import RequeueDecision, RequeueOutcome, RequeueReason
    from tests.unit.test_requeue_plan_command import NOW, preview

    skipped = RequeueDecision(
        uid="v",
        outcome=RequeueOutcome.SKIPPED,
        reason=RequeueReason.DISRUPTION_BUDGET,
        nominated_by=("expectedruntime",),
        decided_at=NOW,
        frees_at=NOW + timedelta(minutes=50),
    )
    lines = render(preview(skipped), at=None).splitlines()
    (row,) = [line for line in lines if line.split()[:3] == ["v", "skipped", "disruption_budget"]]
    detail = lines[lines.index(row) + 1]
    assert detail.strip() == "frees_at: 2026-11-21T12:50:00Z"
    print_json(describe(preview(skipped), at=None))
    (decision,) = json.loads(capsys.readouterr().out)["decisions"]
    assert (decision["reason"], decision["frees_at"]) == (
        "disruption_budget",
        "2026-11-21T12:50:00Z",
    )


def test_the_queues_apply_command_refuses_a_bad_override_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.unit.test_cli import one_error_line

    bad = tmp_path / "q.yaml"
    bad.write_text(annotated_queue({MAX_EVICTIONS_ANNOTATION: "0"}))
    line = one_error_line(["queues", "apply", "-f", str(bad), "--dry-run"], capsys)
    assert line == (
        f'minruntime: error: {bad} document 1 (Queue "team"): metadata.annotations'
        f"['{MAX_EVICTIONS_ANNOTATION}']: must be from 1 to 100000 (unset = unlimited), got 0"
    )
