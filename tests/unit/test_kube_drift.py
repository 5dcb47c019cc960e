"""`kube diff`'s pure comparison: the cluster's PodGroups and pods against the service's rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from minruntime.cluster.drift import (
    FIELDS,
    ClusterPodGroup,
    Difference,
    Drift,
    ServicePodGroup,
    cluster_podgroups,
    compare,
    confirmed,
)
from minruntime.commands.kube_diff import write_metrics
from minruntime.errors import UserError
from tests.cloudevents import stamp

START = datetime(2026, 11, 24, 10, 5, tzinfo=UTC)
EXPECTED = "kai.scheduler/expected-runtime"
DELAY = "kai.scheduler/requeue-delay"
LAST_START = "kai.scheduler/last-start-timestamp"


def podgroup(
    name: str = "train",
    uid: str = "pg-1",
    namespace: str = "team-a",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "namespace": namespace,
            "creationTimestamp": "2026-11-24T10:00:00Z",
            "annotations": annotations or {},
            "labels": labels or {},
        },
        "spec": {"queue": "research", "minMember": 1, **spec},
    }


def pod(
    name: str,
    group: str = "train",
    node: str | None = "gpu-1",
    phase: str = "Running",
    namespace: str = "team-a",
    created: datetime = START - timedelta(minutes=1),
    **meta: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "namespace": namespace,
            "creationTimestamp": stamp(created),
            "annotations": {"pod-group-name": group},
            **meta,
        },
        "spec": {"containers": [], **({"nodeName": node} if node else {})},
        "status": {"phase": phase},
    }


def running_row(uid: str = "pg-1", **fields: Any) -> ServicePodGroup:
    values: dict[str, Any] = {
        "uid": uid,
        "status": "running",
        "name": "train",
        "namespace": "team-a",
        "queue": "research",
        "start_time": START,
        "running_pods": 1,
        "annotations": {LAST_START: stamp(START)},
        **fields,
    }
    return ServicePodGroup(**values)


def gang(*pods: dict[str, Any], **podgroup_fields: Any) -> dict[str, ClusterPodGroup]:
    return cluster_podgroups([podgroup(**podgroup_fields)], pods)


def started(**podgroup_fields: Any) -> dict[str, Any]:
    annotations = {LAST_START: stamp(START), **podgroup_fields.pop("annotations", {})}
    return {"annotations": annotations, **podgroup_fields}


def fields(drift: Drift) -> dict[str, tuple[str | None, str | None]]:
    return {d.field: (d.cluster, d.service) for d in drift.differences}


# -- agreement and presence -----------------------------------------------------------------


def test_a_running_gang_the_service_holds_alike_has_no_difference() -> None:
    drift = compare(gang(pod("train-0"), **started()), [running_row()])
    assert drift == Drift((), 1)


def test_a_gang_unknown_to_the_service_is_missing_there() -> None:
    drift = compare(gang(pod("train-0")), [])
    assert drift.differences == (
        Difference("pg-1", "team-a", "train", "present", "running", "missing"),
    )
    assert drift.checked == 1


def test_a_podgroup_without_pods_is_not_expected_in_the_service() -> None:
    # The bridge submits a podgroup once it has a pod: nothing to compare yet.
    assert compare(gang(), []) == Drift((), 0)


def test_a_podgroup_the_service_holds_and_the_cluster_lost_is_missing_in_the_cluster() -> None:
    drift = compare({}, [running_row()])
    assert fields(drift) == {"present": ("missing", "running")}


def test_a_podgroup_deleted_in_the_service_and_gone_from_the_cluster_agrees() -> None:
    assert compare({}, [running_row(status="deleted")]) == Drift((), 0)


def test_a_podgroup_deleted_in_the_service_but_still_in_the_cluster_differs() -> None:
    drift = compare(gang(pod("train-0"), **started()), [running_row(status="deleted")])
    assert fields(drift) == {"present": ("running", "deleted")}


def test_a_placeholder_without_namespace_is_compared_by_uid() -> None:
    row = running_row(name=None, namespace=None, queue=None)
    drift = compare(gang(pod("train-0"), **started()), [row], namespace="team-a")
    assert fields(drift) == {"queue": ("research", None)}


def test_a_namespace_limits_both_sides() -> None:
    cluster = cluster_podgroups(
        [podgroup(), podgroup("other", "pg-2", "team-b")],
        [pod("train-0"), pod("other-0", "other", namespace="team-b")],
        namespace="team-a",
    )
    assert set(cluster) == {"pg-1"}
    rows = [running_row(), running_row("pg-3", name="gone", namespace="team-b")]
    drift = compare(cluster, rows, namespace="team-a")
    assert drift.checked == 1
    assert {d.uid for d in drift.differences} <= {"pg-1"}


def test_pods_belong_to_the_podgroup_of_their_own_namespace() -> None:
    cluster = cluster_podgroups([podgroup()], [pod("train-0", namespace="team-b")])
    assert cluster["pg-1"].pods == ()


# -- status and running pods -------------------------------------------------------------------


def test_a_bound_pod_runs_the_podgroup_the_service_thinks_pending() -> None:
    drift = compare(
        gang(pod("train-0"), pod("train-1"), **started()),
        [running_row(status="pending", running_pods=0, start_time=None)],
    )
    assert fields(drift) == {"status": ("running", "pending"), "running_pods": ("2", "0")}


def test_finished_and_unbound_pods_hold_nothing() -> None:
    cluster = gang(
        pod("train-0", phase="Succeeded"),
        pod("train-1", phase="Failed"),
        pod("train-2", node=None, phase="Pending"),
        **started(),
    )
    assert cluster["pg-1"].running == ()
    drift = compare(cluster, [running_row(running_pods=2)])
    assert fields(drift) == {"status": ("finished", "running"), "running_pods": ("0", "2")}


def test_a_pod_being_deleted_still_holds_its_gpus() -> None:
    leaving = pod("train-0", deletionTimestamp="2026-11-24T10:30:00Z")
    assert compare(gang(leaving, **started()), [running_row()]).differences == ()


def test_pending_and_finished_are_not_told_apart() -> None:
    # A run whose pods are gone leaves no trace in the cluster but KAI's annotation.
    cluster = gang(pod("train-0", phase="Succeeded"))
    assert cluster["pg-1"].status == "finished"
    row = running_row(status="pending", running_pods=0, start_time=None, annotations={})
    assert compare(cluster, [row]).differences == ()


def test_a_gang_that_never_ran_is_pending() -> None:
    assert gang(pod("train-0", node=None, phase="Pending"))["pg-1"].status == "pending"


# -- queue and annotations -------------------------------------------------------------------


def test_the_queue_comes_from_the_spec_else_the_label_as_the_bridge_submits() -> None:
    by_label = cluster_podgroups(
        [podgroup(queue="", labels={"kai.scheduler/queue": "from-label"})], [pod("train-0")]
    )
    assert by_label["pg-1"].queue == "from-label"
    labelled_pod = pod("train-0")
    labelled_pod["metadata"]["labels"] = {"kai.scheduler/queue": "from-pod"}
    assert cluster_podgroups([podgroup(queue="")], [labelled_pod])["pg-1"].queue == "from-pod"
    drift = compare(gang(pod("train-0"), **started()), [running_row(queue="elsewhere")])
    assert fields(drift) == {"queue": ("research", "elsewhere")}


def test_the_annotations_that_matter_are_compared_as_strings() -> None:
    cluster = gang(
        pod("train-0"),
        **started(annotations={EXPECTED: "2h", "example.com/owner": "ann"}),
    )
    row = running_row(annotations={LAST_START: stamp(START), DELAY: "5m", EXPECTED: "1h"})
    assert fields(compare(cluster, [row])) == {EXPECTED: ("2h", "1h"), DELAY: (None, "5m")}


def test_an_annotation_added_in_the_cluster_is_absent_in_the_service() -> None:
    cluster = gang(pod("train-0"), **started(annotations={EXPECTED: "30m"}))
    assert fields(compare(cluster, [running_row()])) == {EXPECTED: ("30m", None)}


# -- start time ------------------------------------------------------------------------------


def test_the_start_time_must_be_kais_last_start_timestamp() -> None:
    cluster = gang(pod("train-0"), **started())
    later = START + timedelta(seconds=7)
    drift = compare(cluster, [running_row(start_time=later)])
    assert fields(drift) == {"start_time": (stamp(START), stamp(later))}


def test_without_a_last_start_timestamp_the_start_time_is_not_compared() -> None:
    row = running_row(start_time=START + timedelta(hours=1), annotations={})
    assert compare(gang(pod("train-0")), [row]).differences == ()


def test_a_last_start_older_than_a_running_pod_fixes_no_start_time() -> None:
    # The pod was made after KAI's start: its allocation carried the pod's own times.
    young = pod("train-0", created=START + timedelta(minutes=5))
    row = running_row(start_time=START + timedelta(minutes=6))
    assert compare(gang(young, **started()), [row]).differences == ()


def test_an_unreadable_last_start_fixes_no_start_time() -> None:
    cluster = gang(pod("train-0"), annotations={LAST_START: "yesterday"})
    row = running_row(annotations={LAST_START: "yesterday"}, start_time=START)
    assert compare(cluster, [row]).differences == ()


def test_the_start_time_is_compared_only_while_both_sides_run() -> None:
    row = running_row(status="finished", running_pods=0, start_time=None)
    drift = compare(gang(pod("train-0"), **started()), [row])
    assert set(fields(drift)) == {"status", "running_pods"}


# -- counts ----------------------------------------------------------------------------------


def test_counts_name_every_field_and_podgroups_keep_the_differences_order() -> None:
    cluster = cluster_podgroups(
        [podgroup(), podgroup("b", "pg-2")],
        [pod("train-0"), pod("b-0", "b")],
    )
    rows = [running_row(annotations={}, queue="x"), running_row("pg-9", name="z")]
    drift = compare(cluster, rows)
    counts = drift.podgroups_by_field()
    assert list(counts) == list(FIELDS)
    assert counts["present"] == 2  # pg-2 unknown to the service, pg-9 gone from the cluster
    assert counts["queue"] == 1
    assert counts["status"] == 0
    assert drift.uids == ("pg-2", "pg-1", "pg-9")  # by namespace/name: b, train, z
    assert drift.checked == 3


def test_only_differences_a_second_listing_finds_again_are_confirmed() -> None:
    # Listed before the service was read: no PodGroup yet, the pod not bound.
    first = compare({}, [running_row("pg-new", name="new"), running_row()])
    # Listed after: the new PodGroup exists (in flight, not drift); pg-1 is still gone.
    second = compare(
        gang(pod("new-0", "new"), **started(), uid="pg-new", name="new"),
        [running_row("pg-new", name="new"), running_row()],
    )
    assert {d.uid for d in first.differences} == {"pg-new", "pg-1"}
    sure = confirmed(first, second)
    assert [(d.uid, d.field) for d in sure.differences] == [("pg-1", "present")]
    assert sure.checked == second.checked


def test_the_metric_file_counts_every_field(tmp_path: Path) -> None:
    drift = compare(gang(pod("train-0"), **started()), [running_row(queue="x")])
    path = tmp_path / "drift.prom"
    write_metrics(drift, path, START)
    text = path.read_text()
    for name in FIELDS:
        assert f'minruntime_kube_drift_podgroups{{field="{name}"}}' in text
    assert 'minruntime_kube_drift_podgroups{field="queue"} 1.0' in text
    assert "minruntime_kube_drift_checked_podgroups 1.0" in text
    [stamped] = [
        line for line in text.splitlines() if line.startswith("minruntime_kube_drift_checked_t")
    ]
    assert float(stamped.split()[1]) == START.timestamp()
    with pytest.raises(UserError, match="cannot write --metrics-file"):
        write_metrics(drift, tmp_path / "no" / "such" / "dir.prom", START)
