"""What the cluster shows against what the service holds, podgroup by podgroup.

Pure (no API calls, no database, no clock): the cluster side is the PodGroups and pods as
listed (``mirror.kept`` objects or the API server's own), the service side the rows of the
read surface's ``minruntime.podgroups``. ``compare`` answers the differences, one per podgroup
and field; ``minruntime kube diff`` prints them (docs/kubernetes.md, "Reconciliation").

Per podgroup uid:

- ``present``: in the cluster (with at least one pod: the bridge submits a gang once it has
  one) and unknown to the service, or deleted there; known to the service as not deleted and
  gone from the cluster.
- ``status``: running on one side only. The cluster runs a podgroup while one of its pods is
  bound (``spec.nodeName``) and not finished (``Succeeded``/``Failed``): a pod being deleted
  still holds its GPUs. ``pending`` and ``finished`` are not told apart: the cluster keeps no
  record of a run whose pods are gone.
- ``running_pods``: the number of such pods.
- ``queue``: ``spec.queue``, else the ``kai.scheduler/queue`` label (of the PodGroup, else of
  its first pod), as the bridge submits it.
- the annotations ``kai.scheduler/expected-runtime``, ``kai.scheduler/requeue-delay`` and
  ``kai.scheduler/last-start-timestamp``: the strings, absent on one side counts.
- ``start_time``: only while both sides run and the PodGroup carries a readable
  ``kai.scheduler/last-start-timestamp`` not older than any of its running pods. The bridge
  then stamps every allocation with it ("Time fields"), so the service's start must equal it;
  otherwise the start came from a pod's own times and is not compared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from minruntime.cluster import mapping
from minruntime.cluster.objects import ApiObject
from minruntime.core import format_rfc3339
from minruntime.core.annotations import EXPECTED_RUNTIME_ANNOTATION, REQUEUE_DELAY_ANNOTATION

PRESENT: Final = "present"
STATUS: Final = "status"
RUNNING_PODS: Final = "running_pods"
QUEUE: Final = "queue"
START_TIME: Final = "start_time"
COMPARED_ANNOTATIONS: Final = (
    EXPECTED_RUNTIME_ANNOTATION,
    REQUEUE_DELAY_ANNOTATION,
    mapping.LAST_START_ANNOTATION,
)
# Every field a difference can name, in the order a podgroup's rows are printed.
FIELDS: Final = (PRESENT, STATUS, RUNNING_PODS, QUEUE, *COMPARED_ANNOTATIONS, START_TIME)

RUNNING: Final = "running"
PENDING: Final = "pending"
FINISHED: Final = "finished"
DELETED: Final = "deleted"
MISSING: Final = "missing"


@dataclass(frozen=True)
class ServicePodGroup:
    """One row of ``minruntime.podgroups`` (a placeholder has no name, namespace or queue)."""

    uid: str
    status: str
    name: str | None = None
    namespace: str | None = None
    queue: str | None = None
    start_time: datetime | None = None
    running_pods: int = 0
    annotations: Mapping[str, str] = field(default_factory=dict)
    # Names of the pods holding resources (None: not readable with this database role).
    running: tuple[str, ...] | None = None
    # When the service last changed the row (its updated_at), to tell its states apart.
    updated_at: datetime | None = None


def service_podgroup(row: Mapping[str, Any], running: Sequence[str] | None) -> ServicePodGroup:
    """A row of the ``minruntime.podgroups`` view (the public read surface) and the names of
    the pods it holds (None: not readable), as compared."""
    return ServicePodGroup(
        uid=row["uid"],
        status=row["status"],
        name=row["name"],
        namespace=row["namespace"],
        queue=row["queue"],
        start_time=row["start_time"],
        running_pods=row["running_pods"] or 0,
        annotations={str(k): str(v) for k, v in (row["annotations"] or {}).items()},
        running=None if running is None else tuple(sorted(running)),
        updated_at=row["updated_at"],
    )


@dataclass(frozen=True)
class ClusterPodGroup:
    """A PodGroup and the pods that name it (its ``pod-group-name`` annotation)."""

    podgroup: ApiObject
    pods: tuple[ApiObject, ...]

    @property
    def uid(self) -> str:
        return mapping.uid_of(self.podgroup)

    @property
    def running(self) -> tuple[ApiObject, ...]:
        """The pods holding resources: bound and not finished."""
        return tuple(pod for pod in self.pods if mapping.holds_resources(pod))

    @property
    def status(self) -> str:
        """running, else finished (a pod ran, or KAI wrote a start), else pending."""
        if self.running:
            return RUNNING
        ran = any(mapping.pod_node(pod) is not None for pod in self.pods)
        if ran or mapping.LAST_START_ANNOTATION in mapping.annotations_of(self.podgroup):
            return FINISHED
        return PENDING

    @property
    def queue(self) -> str | None:
        """The queue the bridge submits: spec.queue, else the queue label."""
        queue = mapping.podgroup_spec(self.podgroup).get("queue")
        if isinstance(queue, str) and queue:
            return queue
        first = sorted(self.pods, key=mapping.name_of)[:1]
        labels = {**(mapping.labels_of(first[0]) if first else {})}
        labels.update(mapping.labels_of(self.podgroup))
        label = labels.get(mapping.QUEUE_LABEL)
        return label if isinstance(label, str) and label else None

    @property
    def expected_start(self) -> datetime | None:
        """The service's start time by the documented rule, when the rule fixes one."""
        running = self.running
        if not running:
            return None
        text = mapping.annotations_of(self.podgroup).get(mapping.LAST_START_ANNOTATION)
        last_start = mapping.parse_time(text)
        if last_start is None:
            return None
        for pod in running:
            created = mapping.created_at(pod)
            if created is not None and created > last_start:
                return None  # a pod of a later run: its own times stamped its allocation
        return last_start


@dataclass(frozen=True)
class Difference:
    """One field of one podgroup that the two sides see differently (None: absent)."""

    uid: str
    namespace: str
    name: str
    field: str
    cluster: str | None
    service: str | None


@dataclass(frozen=True)
class Drift:
    """Every difference, and how many podgroups were compared."""

    differences: tuple[Difference, ...]
    checked: int

    def podgroups_by_field(self) -> dict[str, int]:
        """How many podgroups differ in each field (every field, zeros too)."""
        return {**dict.fromkeys(FIELDS, 0), **Counter(d.field for d in self.differences)}

    @property
    def uids(self) -> tuple[str, ...]:
        """The podgroups that differ, in the order of the differences."""
        return tuple(dict.fromkeys(difference.uid for difference in self.differences))


def confirmed(first: Drift, second: Drift) -> Drift:
    """The differences ``second`` (a later listing against the same rows) finds again.

    A change made while the service was read (a PodGroup created, a pod bound and applied
    at once) shows in one comparison only: it is in flight, not drift, and not repaired.
    """
    seen = set(first.differences)
    return Drift(tuple(d for d in second.differences if d in seen), second.checked)


def cluster_podgroups(
    podgroups: Iterable[ApiObject],
    pods: Iterable[ApiObject],
    namespace: str | None = None,
) -> dict[str, ClusterPodGroup]:
    """The listed PodGroups (of ``namespace``, or all) with their pods, by uid."""
    members: dict[tuple[str, str], list[ApiObject]] = {}
    for pod in pods:
        group = mapping.pod_group_name(pod)
        if group is not None:
            members.setdefault((mapping.namespace_of(pod), group), []).append(pod)
    found: dict[str, ClusterPodGroup] = {}
    for podgroup in podgroups:
        uid = mapping.metadata(podgroup).get("uid")
        space = mapping.namespace_of(podgroup)
        if not isinstance(uid, str) or not uid or namespace not in (None, space):
            continue
        gang = members.get((space, mapping.name_of(podgroup)), [])
        found[uid] = ClusterPodGroup(podgroup, tuple(sorted(gang, key=mapping.name_of)))
    return found


def compare(
    cluster: Mapping[str, ClusterPodGroup],
    service: Iterable[ServicePodGroup],
    namespace: str | None = None,
) -> Drift:
    """The differences between the two sides (of ``namespace``, or of everything)."""
    rows = {
        row.uid: row
        for row in service
        if namespace is None or row.namespace == namespace or row.uid in cluster
    }
    differences: list[Difference] = []
    checked = 0
    for uid in sorted(
        cluster.keys() | rows.keys(),
        key=lambda uid: (*_identity(cluster.get(uid), rows.get(uid)), uid),
    ):
        found = _compare_one(cluster.get(uid), rows.get(uid))
        if found is not None:
            checked += 1
            differences += found
    return Drift(tuple(differences), checked)


def _identity(side: ClusterPodGroup | None, row: ServicePodGroup | None) -> tuple[str, str]:
    if side is not None:
        return mapping.namespace_of(side.podgroup), mapping.name_of(side.podgroup)
    assert row is not None
    return row.namespace or "", row.name or ""


def _compare_one(
    side: ClusterPodGroup | None, row: ServicePodGroup | None
) -> list[Difference] | None:
    """The differences of one podgroup; None when there is nothing to compare."""
    namespace, name = _identity(side, row)
    uid = side.uid if side is not None else row.uid if row is not None else ""

    def differ(field: str, cluster: str | None, service: str | None) -> Difference:
        return Difference(uid, namespace, name, field, cluster, service)

    if side is None:
        if row is None or row.status == DELETED:
            return None  # gone on both sides
        return [differ(PRESENT, MISSING, row.status)]
    if row is None:
        if not side.pods:
            return None  # the bridge submits a podgroup once it has a pod
        return [differ(PRESENT, side.status, MISSING)]
    if row.status == DELETED:
        return [differ(PRESENT, side.status, DELETED)]
    found: list[Difference] = []
    status = side.status
    if (status == RUNNING) != (row.status == RUNNING):
        found.append(differ(STATUS, status, row.status))
    running = len(side.running)
    if running != row.running_pods:
        found.append(differ(RUNNING_PODS, str(running), str(row.running_pods)))
    if side.queue != row.queue:
        found.append(differ(QUEUE, side.queue, row.queue))
    annotations = mapping.annotations_of(side.podgroup)
    for key in COMPARED_ANNOTATIONS:
        if annotations.get(key) != row.annotations.get(key):
            found.append(differ(key, annotations.get(key), row.annotations.get(key)))
    expected = side.expected_start
    if expected is not None and row.status == RUNNING and row.start_time != expected:
        started = None if row.start_time is None else format_rfc3339(row.start_time)
        found.append(differ(START_TIME, format_rfc3339(expected), started))
    return found
