"""KAI's evictions seen by the bridge: Evict Events, last-eviction-timestamp and DisruptionTarget
correlated with pod deletions (cluster/evictions.py through the pure ClusterMirror, a fake clock).

Objects are written as KAI writes them (pkg/scheduler/cache/status_updater/
default_status_updater.go): one core/v1 Event per evicted pod, on the PodGroup, reason
``Evict``, reported by the scheduler's name, with the ``evictor-*`` annotations; the PodGroup's
``kai.scheduler/last-eviction-timestamp`` in UTC whole seconds; the pod deleted by a plain
DELETE (no condition)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from minruntime.cluster import evictions
from minruntime.cluster.context import Emission, MirrorOptions
from minruntime.cluster.metrics import EvictionMetrics
from minruntime.cluster.mirror import ADDED, DELETED, MODIFIED, ClusterMirror
from minruntime.cluster.objects import Kind
from minruntime.core import format_rfc3339
from tests.unit.test_cluster_mirror import data, pod, podgroup, types

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
RUN_START = "2026-11-24T11:00:00Z"
WINDOW = timedelta(seconds=5)


class Scene:
    """A running gang `train` (pods train-0, train-1 on n1) in team-a, and its would-be evictor
    `hog` (queue prod), in a mirror with a 5 s window and a clock the test moves."""

    def __init__(self, window: timedelta = WINDOW) -> None:
        self.now = T0
        self.signals: Counter[tuple[str, str]] = Counter()
        self.releases: Counter[str] = Counter()
        self.mirror = ClusterMirror(
            MirrorOptions(eviction_window=window),
            lambda: self.now,
            tally=lambda signal, outcome: self.signals.update([(signal, outcome)]),
            released=lambda attribution: self.releases.update([attribution]),
        )
        self.group = podgroup(annotations={"kai.scheduler/last-start-timestamp": RUN_START})
        self.observe(Kind.POD_GROUP, ADDED, self.group)
        hog = podgroup("hog", "pg-9", queue="prod")
        self.observe(Kind.POD_GROUP, ADDED, hog)
        for index in range(2):
            self.observe(Kind.POD, ADDED, self.pod(index))

    def observe(self, kind: Kind, action: str, obj: dict[str, Any]) -> list[Emission]:
        return self.mirror.observe(kind, action, obj)

    def pod(self, index: int, uid: str | None = None, **extra: Any) -> dict[str, Any]:
        return pod(f"train-{index}", uid or f"p-{index}", node="n1", **extra)

    def delete(self, index: int, at: datetime | None = None, **extra: Any) -> list[Emission]:
        """KAI's plain DELETE, as the watch reports it once the pod is gone (grace 0)."""
        when = format_rfc3339(at or self.now)
        gone = self.pod(index, deletionTimestamp=when, deletionGracePeriodSeconds=0, **extra)
        return self.observe(Kind.POD, DELETED, gone)

    def annotate(self, stamp: str) -> list[Emission]:
        annotations = {
            "kai.scheduler/last-start-timestamp": RUN_START,
            evictions.LAST_EVICTION_ANNOTATION: stamp,
        }
        return self.observe(Kind.POD_GROUP, MODIFIED, podgroup(rv="11", annotations=annotations))

    def tick(self, seconds: float) -> list[Emission]:
        self.now += timedelta(seconds=seconds)
        return self.mirror.due()


def evict_event(
    uid: str = "ev-1",
    at: datetime = T0,
    *,
    count: int = 1,
    component: str = "kai-scheduler",
    annotations: dict[str, str] | None = None,
    group: str = "train",
    group_uid: str = "pg-1",
) -> dict[str, Any]:
    """An Evict Event as KAI's recorder writes it (client-go's record package)."""
    stamp = format_rfc3339(at)
    if annotations is None:
        annotations = {
            "evictor-action-type": "preempt",
            "evictor-pod-group-name": "hog",
            "evictor-pod-group-namespace": "team-a",
            "num-evicted-pods": "2",
        }
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{group}.{uid}",
            "namespace": "team-a",
            "uid": uid,
            "resourceVersion": f"{100 + count}",
            "creationTimestamp": stamp,
            "annotations": annotations,
        },
        "involvedObject": {
            "kind": "PodGroup",
            "namespace": "team-a",
            "name": group,
            "uid": group_uid,
            "apiVersion": "scheduling.run.ai/v2alpha2",
        },
        "reason": "Evict",
        "message": "Pod team-a/train-0 was preempted by higher priority workload team-a/hog",
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": count,
        "type": "Normal",
    }


def released(emissions: list[Emission]) -> list[dict[str, Any]]:
    return [data(e) for e in emissions if e.event.type == "podgroup.released"]


BY_HOG = {
    "source": "event",
    "action": "preempt",
    "evictor": "team-a/hog",
    "evictorQueue": "prod",
    "at": "2026-11-24T12:00:00Z",
}


def test_an_event_first_attributes_the_deletions_that_follow() -> None:
    scene = Scene()
    assert scene.observe(Kind.EVENT, ADDED, evict_event()) == []
    [first] = released(scene.delete(0))
    assert first == {"uid": "pg-1", "pods": ["train-0"], "reason": "evicted", "eviction": BY_HOG}
    [second] = released(scene.delete(1, T0 + timedelta(seconds=1)))
    assert second["eviction"] == BY_HOG
    assert scene.signals[("event", "accepted")] == 1
    assert scene.releases == Counter({"event": 2})


def test_a_deletion_first_is_held_until_its_event_comes() -> None:
    scene = Scene()
    assert scene.delete(0) == []  # held: the Event may be on its way
    assert scene.mirror.evictions.held_count == 1
    assert scene.tick(2) == []
    [late_but_in_time] = released(scene.observe(Kind.EVENT, ADDED, evict_event()))
    assert late_but_in_time["reason"] == "evicted"
    assert late_but_in_time["eviction"] == BY_HOG
    assert scene.mirror.evictions.held_count == 0
    assert scene.tick(10) == []  # nothing left to fall due: one release per pod


def test_without_a_signal_a_deletion_is_plain_after_the_window_and_a_late_event_counted() -> None:
    scene = Scene()
    assert scene.delete(0) == []
    assert scene.tick(4.9) == []
    [plain] = released(scene.tick(0.1))
    assert plain == {"uid": "pg-1", "pods": ["train-0"], "reason": "deleted"}
    assert scene.observe(Kind.EVENT, ADDED, evict_event()) == []  # late: no second release
    assert scene.signals[("event", "late")] == 1
    assert scene.releases == Counter({"none": 1})


def test_the_annotation_alone_attributes_a_deletion() -> None:
    scene = Scene()
    assert scene.delete(0) == []
    emissions = scene.annotate("2026-11-24T12:00:00Z")
    [attributed] = released(emissions)
    assert attributed["eviction"] == {"source": "annotation", "at": "2026-11-24T12:00:00Z"}
    assert attributed["reason"] == "evicted"
    assert "podgroup.annotated" in types(emissions)  # the annotation still reaches the service
    # The Event that follows names the action and the evictor: the next deletion carries both.
    scene.observe(Kind.EVENT, ADDED, evict_event())
    [second] = released(scene.delete(1))
    assert second["eviction"] == BY_HOG


def test_a_disruption_target_condition_is_an_eviction_without_an_evictor() -> None:
    scene = Scene()
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "lastTransitionTime": "2026-11-24T11:59:58Z",
    }
    assert scene.delete(0, conditions=[condition]) == []  # still waits for the Event's details
    [attributed] = released(scene.tick(5))
    assert attributed["reason"] == "evicted"
    assert attributed["eviction"] == {"source": "condition", "at": "2026-11-24T11:59:58Z"}


def test_a_terminating_pod_is_linked_when_the_event_comes_and_released_when_it_is_gone() -> None:
    scene = Scene()
    grace = 30  # KAI's DELETE with the pod's grace period: the kubelet ends it later
    terminating = scene.pod(
        0,
        deletionTimestamp=format_rfc3339(T0 + timedelta(seconds=grace)),
        deletionGracePeriodSeconds=grace,
    )
    assert scene.observe(Kind.POD, MODIFIED, terminating) == []
    assert scene.observe(Kind.EVENT, ADDED, evict_event()) == []
    scene.now += timedelta(seconds=grace)
    failed = {**terminating, "status": {"phase": "Failed"}}  # SIGTERM, exit 143
    [attributed] = released(scene.observe(Kind.POD, MODIFIED, failed))
    assert attributed["reason"] == "evicted"  # not "failed": its deletion ended it
    assert attributed["eviction"] == BY_HOG
    assert released(scene.observe(Kind.POD, DELETED, failed)) == []


def test_the_same_event_twice_or_counted_up_releases_each_pod_once() -> None:
    scene = Scene()
    scene.observe(Kind.EVENT, ADDED, evict_event())
    scene.observe(Kind.EVENT, MODIFIED, evict_event())
    scene.observe(Kind.EVENT, MODIFIED, evict_event(count=2, at=T0 + timedelta(seconds=1)))
    assert scene.signals[("event", "duplicate")] == 1
    assert scene.signals[("event", "repeated")] == 1
    assert len(released(scene.delete(0))) == 1
    assert released(scene.delete(0)) == []  # the same deletion seen again (a relist)
    assert released(scene.tick(60)) == []


def test_an_evict_event_of_another_component_is_ignored_and_counted() -> None:
    scene = Scene()
    assert scene.observe(Kind.EVENT, ADDED, evict_event(component="default-scheduler")) == []
    assert scene.signals[("event", "other_source")] == 1
    scene.delete(0)
    [plain] = released(scene.tick(5))
    assert plain["reason"] == "deleted"


@pytest.mark.parametrize(
    ("stamp", "outcome"),
    [
        ("not-a-time", "bad_time"),
        ("2099-01-01T00:00:00Z", "future"),
        ("2026-11-24T10:00:00Z", "stale"),  # before the run's last-start-timestamp
    ],
)
def test_a_last_eviction_timestamp_that_cannot_be_believed_is_ignored(
    stamp: str, outcome: str
) -> None:
    scene = Scene()
    scene.delete(0)
    assert released(scene.annotate(stamp)) == []
    assert scene.signals[("annotation", outcome)] == 1
    [plain] = released(scene.tick(5))
    assert plain["reason"] == "deleted"


def test_an_event_without_a_readable_time_or_from_the_future_is_ignored() -> None:
    scene = Scene()
    timeless = evict_event()
    for key in ("firstTimestamp", "lastTimestamp"):
        timeless[key] = "soon"
    del timeless["metadata"]["creationTimestamp"]
    scene.observe(Kind.EVENT, ADDED, timeless)
    scene.observe(Kind.EVENT, ADDED, evict_event("ev-2", T0 + timedelta(days=1)))
    assert scene.signals[("event", "bad_time")] == 1
    assert scene.signals[("event", "future")] == 1
    assert released(scene.delete(0)) == []


def test_an_evictor_that_no_longer_exists_is_named_without_a_queue() -> None:
    scene = Scene()
    scene.observe(Kind.POD_GROUP, DELETED, podgroup("hog", "pg-9", queue="prod"))
    scene.observe(Kind.EVENT, ADDED, evict_event())
    [attributed] = released(scene.delete(0))
    assert attributed["eviction"] == {k: v for k, v in BY_HOG.items() if k != "evictorQueue"}
    assert scene.signals[("event", "unknown_evictor")] == 1


@pytest.mark.parametrize(
    ("annotations", "expected", "outcome"),
    [
        ({}, {}, "unannotated"),  # client-go's "(combined from similar events)" Event has none
        (
            {"evictor-action-type": "Pre empt!" + "x" * 100, "evictor-pod-group-name": "hog"},
            {},
            "malformed",
        ),
        (
            {
                "evictor-action-type": "RECLAIM",
                "evictor-pod-group-name": "Bad_Name",
                "evictor-pod-group-namespace": "team-a",
            },
            {"action": "reclaim"},
            "malformed",
        ),
    ],
)
def test_missing_or_malformed_event_annotations_attribute_what_is_valid(
    annotations: dict[str, str], expected: dict[str, str], outcome: str
) -> None:
    scene = Scene()
    scene.observe(Kind.EVENT, ADDED, evict_event(annotations=annotations))
    [attributed] = released(scene.delete(0))
    assert attributed["eviction"] == {"source": "event", "at": "2026-11-24T12:00:00Z", **expected}
    assert scene.signals[("event", outcome)] == 1


def test_a_late_event_does_not_attribute_pods_made_again_after_it() -> None:
    scene = Scene()
    scene.delete(0)
    scene.tick(5)  # sent as a plain deletion
    recreated = scene.pod(0, "p-0b", creationTimestamp=format_rfc3339(T0 + timedelta(seconds=6)))
    scene.observe(Kind.POD, ADDED, recreated)
    scene.observe(Kind.EVENT, ADDED, evict_event())  # the old eviction's Event, late
    gone = {
        **recreated,
        "metadata": {**recreated["metadata"], "deletionTimestamp": format_rfc3339(scene.now)},
    }
    assert released(scene.observe(Kind.POD, DELETED, gone)) == []
    [plain] = released(scene.tick(5))
    assert plain["reason"] == "deleted"


def test_an_event_of_an_earlier_podgroup_of_the_same_name_is_stale() -> None:
    scene = Scene()
    scene.observe(Kind.EVENT, ADDED, evict_event(group_uid="pg-old"))
    assert scene.signals[("event", "stale")] == 1
    assert released(scene.delete(0)) == []


def test_held_releases_go_before_the_podgroup_is_deleted_or_a_pod_of_the_same_name_starts() -> None:
    scene = Scene()
    scene.delete(0)
    successor = scene.pod(0, "p-0b")
    emissions = scene.observe(Kind.POD, ADDED, successor)
    assert types(emissions)[:2] == ["podgroup.released", "podgroup.submitted"]
    scene.delete(1)
    emissions = scene.observe(Kind.POD_GROUP, DELETED, scene.group)
    assert types(emissions) == ["podgroup.released", "podgroup.deleted"]


def test_the_caps_hold_a_bounded_number_and_send_the_oldest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(evictions, "MAX_HELD", 1)
    monkeypatch.setattr(evictions, "MAX_SIGNAL_GROUPS", 1)
    scene = Scene()
    assert scene.delete(0) == []
    [oldest] = released(scene.delete(1, T0 + timedelta(seconds=1)))  # over the cap: sent now
    assert oldest == {"uid": "pg-1", "pods": ["train-0"], "reason": "deleted"}
    scene.observe(Kind.EVENT, ADDED, evict_event())
    scene.observe(Kind.EVENT, ADDED, evict_event("ev-2", group="other", group_uid="pg-7"))
    assert scene.signals[("event", "dropped")] == 1


def test_a_pod_gone_while_no_bridge_watched_is_attributed_from_the_listed_events() -> None:
    first = Scene()
    memory = first.mirror.memory()
    assert memory["pod/p-0"]["created"] == "2026-11-24T10:00:00Z"
    later = Scene()  # a new term: the ledger, then the listing, with both pods gone
    later.mirror = ClusterMirror(
        MirrorOptions(eviction_window=WINDOW), lambda: T0 + timedelta(minutes=5), memory
    )
    listing = {
        Kind.POD_GROUP: [later.group, podgroup("hog", "pg-9", queue="prod")],
        Kind.EVENT: [evict_event()],
        Kind.POD: [],
    }
    emissions = list(later.mirror.list_all(listing))
    by_pod = {tuple(d["pods"]): d for d in released(emissions)}
    assert by_pod[("train-0",)]["eviction"] == BY_HOG
    assert by_pod[("train-1",)]["reason"] == "evicted"


def test_a_pod_gone_unseen_after_an_old_eviction_stays_a_deletion() -> None:
    first = Scene()
    memory = first.mirror.memory()
    later = ClusterMirror(
        MirrorOptions(eviction_window=WINDOW), lambda: T0 + timedelta(minutes=5), memory
    )
    before_the_pods = evict_event(at=datetime(2026, 11, 24, 9, 0, tzinfo=UTC))
    group = podgroup(annotations={"kai.scheduler/last-start-timestamp": RUN_START})
    listing = {Kind.POD_GROUP: [group], Kind.EVENT: [before_the_pods], Kind.POD: []}
    sent = released(list(later.list_all(listing)))
    assert [emitted["pods"] for emitted in sent] == [["train-0"], ["train-1"]]
    assert all(emitted == {**emitted, "reason": "deleted"} for emitted in sent)
    assert not any("eviction" in emitted for emitted in sent)


def test_the_attributed_release_is_a_valid_event_with_a_deterministic_id() -> None:
    ids = []
    for _ in range(2):
        scene = Scene()
        scene.observe(Kind.EVENT, ADDED, evict_event())
        [emission] = [e for e in scene.delete(0) if e.event.type == "podgroup.released"]
        ids.append(emission.event.id)
        wire = emission.event.data.model_dump(mode="json", by_alias=True, exclude_none=True)
        assert wire["eviction"]["evictorQueue"] == "prod"
    assert ids[0] == ids[1]


def test_without_a_window_nothing_is_held() -> None:
    scene = Scene(window=timedelta(0))
    [plain] = released(scene.delete(0))
    assert plain["reason"] == "deleted"


def test_the_metrics_count_only_their_fixed_labels() -> None:
    registry = CollectorRegistry()
    metrics = EvictionMetrics(registry)
    metrics.signal("event", "accepted")
    metrics.signal("event", "made-up")  # never a new label
    metrics.release("event")
    name = "minruntime_kube_bridge_eviction_signals_total"
    assert registry.get_sample_value(name, {"signal": "event", "outcome": "accepted"}) == 1
    assert registry.get_sample_value(name, {"signal": "event", "outcome": "made-up"}) is None
    assert registry.get_sample_value(name, {"signal": "annotation", "outcome": "late"}) == 0
    releases = "minruntime_kube_bridge_deletion_releases_total"
    assert registry.get_sample_value(releases, {"attribution": "event"}) == 1


# -- whichever arrives first: a property --------------------------------------------------------

STEPS = ("event", "event_again", "counted_up", "annotation", "terminating", "gone", "tick")


@settings(max_examples=300, deadline=None)
@given(
    order=st.permutations(STEPS),
    pause=st.floats(min_value=0, max_value=0.3),  # 14 pauses: 4.2 s at most, within W
    with_event=st.booleans(),
)
def test_whatever_the_order_each_pod_is_released_once_and_attributed_within_the_window(
    order: list[str], pause: float, with_event: bool
) -> None:
    """One eviction of train-0 said by an Event (maybe twice, maybe counted up) and the
    annotation, its deletion seen as terminating and gone, in any order, a little time apart
    (all within the window): one release, evicted, naming the evictor when an Event came."""
    assume(order.index("terminating") < order.index("gone"))  # a watch's order for one pod
    scene = Scene()
    grace = 30
    terminating = scene.pod(
        0,
        deletionTimestamp=format_rfc3339(T0 + timedelta(seconds=grace)),
        deletionGracePeriodSeconds=grace,
    )
    steps = {
        "event": lambda: scene.observe(Kind.EVENT, ADDED, evict_event()),
        "event_again": lambda: scene.observe(Kind.EVENT, MODIFIED, evict_event()),
        "counted_up": lambda: scene.observe(
            Kind.EVENT, MODIFIED, evict_event(count=2, at=T0 + timedelta(seconds=1))
        ),
        "annotation": lambda: scene.annotate("2026-11-24T12:00:00Z"),
        "terminating": lambda: scene.observe(Kind.POD, MODIFIED, terminating),
        "gone": lambda: scene.observe(Kind.POD, DELETED, terminating),
        "tick": lambda: scene.tick(pause),
    }
    emitted: list[Emission] = []
    for step in order:
        if with_event or not step.startswith(("event", "counted")):
            emitted += steps[step]()
        emitted += scene.tick(pause)
    emitted += scene.tick(60)
    [release] = released(emitted)
    assert release["reason"] == "evicted"
    eviction = release["eviction"]
    if with_event and order.index("event") < order.index("gone"):
        assert eviction == BY_HOG or eviction == {**BY_HOG, "at": "2026-11-24T12:00:01Z"}
    else:
        assert eviction["source"] in ("event", "annotation")
    assert scene.mirror.evictions.held_count == 0


def test_an_attribution_the_contract_refuses_never_costs_the_release() -> None:
    scene = Scene()
    scene.observe(Kind.EVENT, ADDED, evict_event())
    [signal] = scene.mirror.evictions._signals[("team-a", "train")]
    scene.mirror.evictions._signals[("team-a", "train")] = [
        replace(signal, evictor_queue="q" * 300)  # past the bound, however it came
    ]
    [unattributed] = released(scene.delete(0))
    assert unattributed == {"uid": "pg-1", "pods": ["train-0"], "reason": "evicted"}
