"""Kubernetes objects (plain dicts, as the API server sends them) -> contract events' data.

Pure: no API calls, no clock reads. Which cluster field supplies each event's `time` is decided
here (docs/kubernetes.md, "Time fields"), and so are the deterministic event ids: a uuid5 of
the object's uid, the transition and the version that makes the transition unique, so a
restarted bridge, a relist or a second replica sends the same id and the processor applies it
once (its `(source, id)` de-duplication).
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from minruntime.cluster.objects import (
    ApiObject,
    KeptCondition,
    KeptContainer,
    KeptMetadata,
    KeptNode,
    KeptPod,
    KeptPodGroup,
    KeptPodSpec,
    KeptPodStatus,
)
from minruntime.core import (
    DEFAULT_NODE_POOL,
    DEFAULT_SUBGROUP,
    PREEMPTION_DELAY_ANNOTATION,
    InvalidTimestampError,
    MinRuntimeError,
    Preemptibility,
    format_rfc3339,
    parse_rfc3339,
)
from minruntime.core.disruption import TOP_OWNER_ANNOTATION, read_top_owner
from minruntime.errors import UserError
from minruntime.events import ConfigUpdatedData, EventRejected, QueueUpsertedData
from minruntime.events.types import (
    MAX_ANNOTATION_KEY,
    MAX_ANNOTATION_VALUE,
    MAX_ANNOTATIONS,
    MAX_LABEL,
    MAX_NAME,
    MAX_TEXT,
)
from minruntime.kube import NODE_POOL_LABEL as NODE_POOL_LABEL  # the bridge's name for it
from minruntime.kube import Manifest, config_update, queue_upserts

SOURCE: Final = "minruntime/kube-bridge"
POD_GROUP_ANNOTATION: Final = "pod-group-name"
GPU_RESOURCE: Final = "nvidia.com/gpu"
GPU_FRACTION_ANNOTATION: Final = "gpu-fraction"
QUEUE_LABEL: Final = "kai.scheduler/queue"
SUBGROUP_LABEL: Final = "kai.scheduler/subgroup-name"
LAST_START_ANNOTATION: Final = "kai.scheduler/last-start-timestamp"
REQUEUE_NOT_BEFORE_ANNOTATION: Final = "kai.scheduler/requeue-not-before"
REQUEUE_DECISION_ANNOTATION: Final = "minruntime.kai.scheduler/requeue-decision"
# Priority of a PodGroup whose priorityClassName names no PriorityClass (or none): Kubernetes'
# own default for pods without a class.
DEFAULT_PRIORITY: Final = 0
# KAI: priority classes at or above this value are non-preemptible unless the PodGroup says.
NON_PREEMPTIBLE_PRIORITY: Final = 100
# kubectl's bookkeeping copy of the whole object: never a scheduling annotation.
_IGNORED_ANNOTATION_PREFIXES: Final = ("kubectl.kubernetes.io/",)
_KAI_PREFIX: Final = "kai.scheduler/"
# A PodGroup's ownerReferences the bridge keeps (KAI writes one: its top owner).
_MAX_OWNER_REFERENCES: Final = 8
# Kept first when a PodGroup has more annotations than the contract allows: KAI's own and the
# checkpoint handshake's (minruntime.kai.scheduler/: the run's last checkpoint).
_KEPT_FIRST: Final = (_KAI_PREFIX, "minruntime.kai.scheduler/")
_ID_NAMESPACE: Final = uuid.UUID("5d0c0b8e-7a44-4f0e-9b55-6b7562652d31")
_ID_PREFIX: Final = _ID_NAMESPACE.bytes


class ObjectError(UserError):
    """A cluster object cannot be mapped to an event (the bridge logs it and goes on)."""


# What a cluster object that cannot be translated raises (the mapping's refusal, the
# contract's, the core's): the object is logged and dropped, never a crash. Anything else is a
# bug and propagates.
UNMAPPABLE: Final = (ObjectError, EventRejected, MinRuntimeError)


def event_id(uid: str, transition: str, version: str = "", content: str = "") -> str:
    """The deterministic CloudEvent id of one transition of one object.

    ``content`` is a digest of the event's data and time (``content_digest``): the same id
    always carries the same payload, so a re-sent event is a true duplicate and never a
    ``conflicting_duplicate``; a transition sent again with other content (a time that the
    cluster only knew later) is another id, applied as the no-op it is.
    """
    # uuid.uuid5's own steps (SHA-1 of the namespace and the name; version 5, RFC 4122
    # variant) without building a UUID object: the same string, a third of the CPU.
    name = f"{uid}/{transition}/{version}/{content}".encode()
    raw = bytearray(hashlib.sha1(_ID_PREFIX + name).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50
    raw[8] = (raw[8] & 0x3F) | 0x80
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def content_digest(event_type: str, data: object, time: datetime) -> str:
    """A digest of what an event says: its type, data and time (for ``event_id``)."""
    return digest([event_type, data, time.isoformat()])


def digest(value: object) -> str:
    """A short stable digest of JSON-able content (for ids of content-defined transitions)."""
    text = _DIGEST_JSON.encode(value)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# json.dumps(value, sort_keys=True, separators=(",", ":"), default=str), built once.
_DIGEST_JSON: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


# -- object metadata -----------------------------------------------------------------------------


def _mapping(value: object) -> ApiObject:
    return value if isinstance(value, dict) or isinstance(value, Mapping) else {}  # noqa: SIM101


def metadata(obj: ApiObject) -> ApiObject:
    return _mapping(obj.get("metadata"))


def uid_of(obj: ApiObject) -> str:
    """metadata.uid (every object the API server returns has one)."""
    uid = metadata(obj).get("uid")
    if not isinstance(uid, str) or not uid:
        raise ObjectError(f"{name_of(obj)}: no metadata.uid")
    return uid


def name_of(obj: ApiObject) -> str:
    return str(metadata(obj).get("name") or "")


def namespace_of(obj: ApiObject) -> str:
    """metadata.namespace ("" for cluster-scoped objects)."""
    return str(metadata(obj).get("namespace") or "")


def annotations_of(obj: ApiObject) -> dict[str, str]:
    """The annotations the bridge sends: metadata.annotations without kubectl's bookkeeping,
    within the contract's bounds (``dropped_annotations`` names the rest)."""
    return _forwarded(obj)[0]


def dropped_annotations(obj: ApiObject) -> list[str]:
    """Annotation keys over the contract's bounds (a key over 317 characters, a value over
    64 KiB, more than 256 keys: KAI's own scheduling annotations and the checkpoint
    handshake's are kept first), not sent."""
    return _forwarded(obj)[1]


def _forwarded(obj: ApiObject) -> tuple[dict[str, str], list[str]]:
    raw = metadata(obj).get("annotations")
    if not isinstance(raw, Mapping):
        return {}, []
    fitting: dict[str, str] = {}
    dropped: list[str] = []
    for key, value in raw.items():
        key, value = str(key), str(value)
        if key.startswith(_IGNORED_ANNOTATION_PREFIXES):
            continue
        if len(key) > MAX_ANNOTATION_KEY or len(value) > MAX_ANNOTATION_VALUE:
            dropped.append(key)
        else:
            fitting[key] = value
    if len(fitting) > MAX_ANNOTATIONS:
        ordered = sorted(fitting, key=lambda key: (not key.startswith(_KEPT_FIRST), key))
        dropped += ordered[MAX_ANNOTATIONS:]
        fitting = {key: fitting[key] for key in ordered[:MAX_ANNOTATIONS]}
    return fitting, dropped


def labels_of(obj: ApiObject) -> Mapping[str, str]:
    return _mapping(metadata(obj).get("labels"))


def version_of(obj: ApiObject) -> str:
    return str(metadata(obj).get("resourceVersion") or "")


def generation_of(obj: ApiObject) -> str:
    """metadata.generation (spec changes only, for custom resources); else resourceVersion."""
    generation = metadata(obj).get("generation")
    return str(generation) if generation is not None else version_of(obj)


def parse_time(value: object) -> datetime | None:
    """An RFC3339 timestamp field, or None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_rfc3339(value)
    except InvalidTimestampError:
        return None


def changed_at(obj: ApiObject) -> datetime | None:
    """When the API server last stored a change: the newest managedFields time, else creation.

    managedFields[].time is written by the API server on every update (server-side field
    tracking), so it is the cluster's own clock, not the writer's.
    """
    times = [
        parse_time(entry.get("time"))
        for entry in metadata(obj).get("managedFields") or ()
        if isinstance(entry, Mapping)
    ]
    known = [moment for moment in times if moment is not None]
    return max(known) if known else created_at(obj)


def changed_text(obj: ApiObject) -> str | None:
    """``changed_at`` as RFC3339 text (``format_rfc3339``), as the bridge keeps it.

    The API server writes every managedFields time as ``YYYY-MM-DDTHH:MM:SSZ``: for such
    texts the newest is the greatest string, and a valid one formats as itself, so only that
    one is parsed (to check it), not every entry parsed and the newest formatted again. Any
    other form takes ``changed_at``'s way (a property test holds them equal).
    """
    texts: list[str] = []
    for entry in metadata(obj).get("managedFields") or ():
        if not isinstance(entry, Mapping):
            continue
        text = entry.get("time")
        if text is None or text == "":
            continue  # read as no time either way
        if not (type(text) is str and _CANONICAL_TIME(text)):
            changed = changed_at(obj)
            return None if changed is None else format_rfc3339(changed)
        texts.append(text)
    for text in sorted(texts, reverse=True):
        if parse_time(text) is not None:
            return text
    created = created_at(obj)
    return None if created is None else format_rfc3339(created)


def _is_canonical_time(text: str) -> bool:
    # Digits where the pattern has digits are checked by parsing (ASCII ones: re.ASCII).
    return (
        len(text) == 20
        and text.isascii()
        and text[19] == "Z"
        and text[10] == "T"
        and text[4] == text[7] == "-"
        and text[13] == text[16] == ":"
    )


_CANONICAL_TIME: Final = _is_canonical_time


def created_at(obj: ApiObject) -> datetime | None:
    return parse_time(metadata(obj).get("creationTimestamp"))


def deleted_at(obj: ApiObject) -> datetime | None:
    """metadata.deletionTimestamp (when the deletion was asked for, plus its grace period)."""
    return parse_time(metadata(obj).get("deletionTimestamp"))


# -- queues, the scheduler config, nodes ---------------------------------------------------------


def node_pool_of(obj: ApiObject, node_pool_label: str) -> str | None:
    """The node pool whose KAI scheduler (shard) sees ``obj``, by KAI's shard rule: the value
    of its ``node_pool_label`` label, else the default shard's (``default``). An empty label
    key (KAI: every shard sees every object) names no pool: None."""
    if not node_pool_label:
        return None
    return labels_of(obj).get(node_pool_label) or DEFAULT_NODE_POOL


def queue_data(
    obj: ApiObject,
    node_pool_label: str = NODE_POOL_LABEL,
    ignored: list[str] | None = None,
) -> QueueUpsertedData:
    """queue.upserted data of a Queue object, through `minruntime queues apply`'s own parser,
    with the node pool of KAI's shard rule (``node_pool_of``; no label key: every pool). A
    disruption annotation out of bounds is left out, its problem appended to ``ignored`` (an
    operator's typo must not stop the whole Queue; `queues apply` refuses it instead)."""
    # As for the ConfigMap below; a Queue's status is the scheduler's, not the spec's.
    body = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", **obj}
    body.pop("status", None)
    manifest = Manifest(f"Queue {name_of(obj)}", 1, body)
    try:
        return queue_upserts(
            [manifest], node_pool_label, DEFAULT_NODE_POOL, [] if ignored is None else ignored
        )[0]
    except (UserError, ValueError) as exc:
        raise ObjectError(str(exc)) from exc


def config_data(obj: ApiObject, node_pool: str) -> ConfigUpdatedData:
    """config.updated data of the scheduler's ConfigMap, through `config apply`'s own parser."""
    # Items of a list response carry no apiVersion/kind; the parser wants the ConfigMap's.
    body = {"apiVersion": "v1", "kind": "ConfigMap", **obj}
    manifest = Manifest(f"ConfigMap {namespace_of(obj)}/{name_of(obj)}", 1, body)
    try:
        return config_update([manifest], node_pool)
    except (UserError, ValueError) as exc:
        raise ObjectError(str(exc)) from exc


def node_data(obj: ApiObject, node_pool_label: str = NODE_POOL_LABEL) -> dict[str, object]:
    """node.upserted data: the node's `nvidia.com/gpu` capacity and its node-pool label."""
    capacity = _mapping(_mapping(obj.get("status")).get("capacity"))
    return {
        "name": name_of(obj),
        "nodePool": node_pool_of(obj, node_pool_label) or DEFAULT_NODE_POOL,
        "gpu": quantity(capacity.get(GPU_RESOURCE, 0)),
    }


def quantity(value: object) -> float:
    """A Kubernetes quantity of a countable resource ("4", 4, "500m") as a number."""
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError as exc:
        raise ObjectError(f"not a resource quantity: {value!r}") from exc
    if not math.isfinite(number) or number < 0:
        raise ObjectError(f"not a resource quantity: {value!r}")
    return int(number) if number.is_integer() else number


# -- pods ----------------------------------------------------------------------------------------


def pod_group_name(pod: ApiObject) -> str | None:
    """The PodGroup a pod belongs to (its `pod-group-name` annotation), if any."""
    name = (metadata(pod).get("annotations") or {}).get(POD_GROUP_ANNOTATION)
    return name if isinstance(name, str) and name else None


def pod_gpu(pod: ApiObject) -> float:
    """GPUs a pod asks for: the `gpu-fraction` annotation, else its containers' nvidia.com/gpu."""
    fraction = (metadata(pod).get("annotations") or {}).get(GPU_FRACTION_ANNOTATION)
    if fraction is not None:
        return quantity(fraction)
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or ():
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU_RESOURCE)
        if amount is None:
            amount = (resources.get("requests") or {}).get(GPU_RESOURCE, 0)
        total += quantity(amount)
    return int(total) if float(total).is_integer() else total


def pod_node(pod: ApiObject) -> str | None:
    """spec.nodeName: set by the binding subresource; the pod then holds its resources."""
    node = (pod.get("spec") or {}).get("nodeName")
    return node if isinstance(node, str) and node else None


def pod_phase(pod: ApiObject) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def condition(pod: ApiObject, kind: str) -> ApiObject | None:
    """The pod's condition of this type when its status is True."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition  # type: ignore[no-any-return]
    return None


def allocated_at(pod: ApiObject, podgroup: ApiObject) -> datetime | None:
    """When a bound pod started holding its resources (docs/kubernetes.md, "Time fields").

    KAI's `kai.scheduler/last-start-timestamp` on the PodGroup when it belongs to this pod's
    run (not older than the pod); else the pod's PodScheduled condition; else status.startTime.
    """
    last_start = parse_time(metadata(podgroup).get("annotations", {}).get(LAST_START_ANNOTATION))
    created = created_at(pod)
    if last_start is not None and (created is None or last_start >= created):
        return last_start
    scheduled = condition(pod, "PodScheduled")
    moment = parse_time(scheduled.get("lastTransitionTime")) if scheduled else None
    return moment or parse_time((pod.get("status") or {}).get("startTime")) or created


@dataclass(frozen=True)
class Release:
    """A bound pod that gave its resources back: why, and the cluster's time of it."""

    reason: str
    time: datetime | None


def finished(pod: ApiObject) -> Release | None:
    """A pod that ran to an end (Succeeded or Failed), with its containers' last finish time."""
    phase = pod_phase(pod)
    if phase not in ("Succeeded", "Failed"):
        return None
    status = pod.get("status") or {}
    if phase == "Failed" and status.get("reason") == "Evicted":
        reason = "evicted"  # the kubelet's node-pressure eviction
    else:
        reason = "completed" if phase == "Succeeded" else "failed"
    finishes = [
        parse_time(((container.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        for container in status.get("containerStatuses") or ()
    ]
    known = [moment for moment in finishes if moment is not None]
    return Release(reason, max(known) if known else changed_at(pod))


def holds_resources(pod: ApiObject) -> bool:
    """Bound and not finished: the pod holds its GPUs (until it is gone, if deleted)."""
    return pod_node(pod) is not None and finished(pod) is None


def removed(pod: ApiObject) -> Release:
    """A pod deleted from the API server: evicted (the Eviction API's DisruptionTarget) or not."""
    ended = finished(pod)
    if ended is not None:
        return ended
    disruption = condition(pod, "DisruptionTarget")
    reason = "evicted" if disruption is not None else "deleted"
    return Release(reason, deleted_at(pod) or changed_at(pod))


# -- podgroups -----------------------------------------------------------------------------------


def podgroup_spec(podgroup: ApiObject) -> ApiObject:
    return _mapping(podgroup.get("spec"))


def priority_class_name(podgroup: ApiObject) -> str | None:
    name = podgroup_spec(podgroup).get("priorityClassName")
    return name if isinstance(name, str) and name else None


def preemptibility(podgroup: ApiObject, priority: int) -> Preemptibility:
    """spec.preemptibility when it is one of KAI's values; else (absent, or a value KAI does
    not know: ignored, as KAI would) KAI's rule: preemptible below priority 100."""
    said = podgroup_spec(podgroup).get("preemptibility")
    if isinstance(said, str) and said in _PREEMPTIBILITIES:
        return Preemptibility(said)
    return Preemptibility.of_flag(priority < NON_PREEMPTIBLE_PRIORITY)


_PREEMPTIBILITIES: Final = frozenset(value.value for value in Preemptibility)


def _preemptibility_fields(value: Preemptibility) -> dict[str, object]:
    # The older wire field for the values it can say, so a processor of an earlier version
    # (a rolling upgrade) still reads them; preemptibility only for semi-preemptible.
    if value is Preemptibility.SEMI_PREEMPTIBLE:
        return {"preemptibility": value.value}
    return {"preemptible": value.preemptible}


def top_owner(podgroup: ApiObject, ignored: list[str] | None = None) -> dict[str, str] | None:
    """The PodGroup's top owner for ``topOwner``: KAI's ``kai.scheduler/top-owner-metadata``
    when present and valid, else the PodGroup's controller ownerReference (KAI's podgrouper
    makes the PodGroup's one ownerReference its pods' top owner, without the controller flag:
    that one then). None: neither. An annotation that does not read is named in ``ignored``."""
    text = annotations_of(podgroup).get(TOP_OWNER_ANNOTATION)
    if text is not None:
        reading = read_top_owner({TOP_OWNER_ANNOTATION: text})
        if reading.owner is not None:
            owner = reading.owner
            if _fits_owner(owner.kind, owner.name, owner.uid):
                return {"kind": owner.kind, "name": owner.name, "uid": owner.uid}
        if ignored is not None:
            ignored.append(reading.problem or f"{TOP_OWNER_ANNOTATION}: a field is too long")
    references = [
        ref for ref in metadata(podgroup).get("ownerReferences") or () if isinstance(ref, Mapping)
    ]
    controllers = [ref for ref in references if ref.get("controller") is True]
    chosen = controllers or (references if len(references) == 1 else [])
    if not chosen:
        return None
    kind, name, uid = (chosen[0].get(key) for key in ("kind", "name", "uid"))
    strings = isinstance(kind, str) and isinstance(name, str) and isinstance(uid, str)
    if strings and _fits_owner(str(kind), str(name), str(uid)):
        return {"kind": str(kind), "name": str(name), "uid": str(uid)}
    return None


def _fits_owner(kind: str, name: str, uid: str) -> bool:
    # The wire's bounds (events.inputs.TopOwner): a kind is a label, the others names.
    return 0 < len(kind) <= MAX_LABEL and 0 < len(name) <= MAX_NAME and 0 < len(uid) <= MAX_NAME


def submission_data(
    podgroup: ApiObject,
    pods: Iterable[ApiObject],
    priority: int,
    node_pool_label: str = NODE_POOL_LABEL,
    ignored: list[str] | None = None,
) -> dict[str, object]:
    """podgroup.submitted data of a PodGroup and the pods that name it (at least one);
    a top-owner annotation that does not read is named in ``ignored``."""
    spec = podgroup_spec(podgroup)
    members = sorted(pods, key=name_of)
    if not members:
        raise ObjectError(f"PodGroup {name_of(podgroup)}: no pods yet")
    labels = {**_first_labels(members), **labels_of(podgroup)}
    queue = spec.get("queue") or labels.get(QUEUE_LABEL)
    if not isinstance(queue, str) or not queue:
        raise ObjectError(f"PodGroup {name_of(podgroup)}: no spec.queue nor {QUEUE_LABEL} label")
    declared: list[dict[str, object]] = [
        {"name": str(group.get("name")), "minAvailable": int(group.get("minMember") or 0)}
        for group in spec.get("subGroups") or ()
        if isinstance(group, Mapping) and group.get("name")
    ]
    # KAI: absent = 1, 0 = no gang (pkg/scheduler/api/podgroup_info/job_info.go, setSubGroups).
    min_member = spec.get("minMember")
    sub_groups = declared or [
        {"name": DEFAULT_SUBGROUP, "minAvailable": 1 if min_member is None else int(min_member)}
    ]
    known = {str(group["name"]) for group in sub_groups}
    data: dict[str, object] = {
        "uid": uid_of(podgroup),
        "name": name_of(podgroup),
        "namespace": namespace_of(podgroup),
        "queue": queue,
        # KAI's shard rule reads the PodGroup's own labels (its pods are not listed by pool).
        "nodePool": node_pool_of(podgroup, node_pool_label) or DEFAULT_NODE_POOL,
        "priority": priority,
        **_preemptibility_fields(preemptibility(podgroup, priority)),
        "subGroups": sub_groups,
        "pods": [_pod_entry(pod, known, str(sub_groups[0]["name"])) for pod in members],
        "annotations": annotations_of(podgroup),
    }
    if "preemptionDelay" in spec and spec["preemptionDelay"] is not None:
        data["preemptionDelay"] = ignorable(spec["preemptionDelay"], MAX_TEXT)
    owner = top_owner(podgroup, ignored)
    if owner is not None:
        data["topOwner"] = owner
    return data


def ignorable(value: object, limit: int) -> str:
    """A setting the processor validates and ignores, counted, when invalid (KAI's rule):
    sent as it is when it is a string within the contract's bound, else as "" (invalid too),
    so a bad value never turns the whole podgroup into a dead letter."""
    return value if isinstance(value, str) and len(value) <= limit else ""


def _pod_entry(pod: ApiObject, known: set[str], fallback: str) -> dict[str, object]:
    entry: dict[str, object] = {
        "name": name_of(pod),
        "subGroup": _subgroup_of(pod, known, fallback),
        "gpu": pod_gpu(pod),
    }
    # Only the pod annotations the service reads: the preemption delay.
    raw = metadata(pod).get("annotations")
    if isinstance(raw, Mapping) and PREEMPTION_DELAY_ANNOTATION in raw:
        value = ignorable(raw[PREEMPTION_DELAY_ANNOTATION], MAX_ANNOTATION_VALUE)
        entry["annotations"] = {PREEMPTION_DELAY_ANNOTATION: value}
    return entry


def _first_labels(pods: list[ApiObject]) -> Mapping[str, str]:
    return labels_of(pods[0]) if pods else {}


def _subgroup_of(pod: ApiObject, known: set[str], fallback: str) -> str:
    named = labels_of(pod).get(SUBGROUP_LABEL)
    return named if isinstance(named, str) and named in known else fallback


# -- what the bridge keeps of an object (the fields the functions above read: cluster.objects)

_POD_ANNOTATIONS: Final = (
    POD_GROUP_ANNOTATION,
    GPU_FRACTION_ANNOTATION,
    PREEMPTION_DELAY_ANNOTATION,
)
_POD_CONDITIONS: Final = ("PodScheduled", "DisruptionTarget")


def _kept_metadata(
    obj: ApiObject,
    labels: Iterable[str] | None,
    annotations: Iterable[str] | None,
) -> KeptMetadata:
    """metadata's identity, times and versions; only the named labels and annotations
    (None: all of them)."""
    meta = metadata(obj)
    kept: KeptMetadata = {  # type: ignore[assignment]  # the API server's values, as sent
        key: meta[key]
        for key in (
            "uid",
            "name",
            "namespace",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        )
        if meta.get(key) is not None
    }
    changed = changed_text(obj)
    if changed is not None:
        kept["managedFields"] = [{"time": changed}]
    raw_labels = labels_of(obj)
    kept["labels"] = (
        dict(raw_labels)
        if labels is None
        else {key: raw_labels[key] for key in labels if key in raw_labels}
    )
    raw_annotations = _mapping(meta.get("annotations"))
    if annotations is None:
        kept["annotations"] = annotations_of(obj)
    else:
        kept["annotations"] = {
            key: raw_annotations[key] for key in annotations if key in raw_annotations
        }
    return kept


def kept_pod(pod: ApiObject, node_pool_label: str = NODE_POOL_LABEL) -> KeptPod:
    """What the bridge keeps of a pod (see above)."""
    spec = _mapping(pod.get("spec"))
    status = _mapping(pod.get("status"))
    containers: list[KeptContainer] = []
    for container in spec.get("containers") or ():
        if not isinstance(container, Mapping):
            continue
        resources = container.get("resources") or {}
        kept_resources = {
            kind: {GPU_RESOURCE: (resources.get(kind) or {})[GPU_RESOURCE]}
            for kind in ("limits", "requests")
            if isinstance(resources.get(kind), Mapping) and GPU_RESOURCE in resources[kind]
        }
        containers.append({"resources": kept_resources})
    kept_spec: KeptPodSpec = {"containers": containers}
    if spec.get("nodeName"):
        kept_spec["nodeName"] = spec["nodeName"]
    kept_status: KeptPodStatus = {  # type: ignore[assignment]  # the API server's values
        key: status[key] for key in ("phase", "reason", "startTime") if status.get(key)
    }
    conditions: list[KeptCondition] = [
        {
            "type": condition.get("type"),
            "status": condition.get("status"),
            "lastTransitionTime": condition.get("lastTransitionTime"),
        }
        for condition in status.get("conditions") or ()
        if isinstance(condition, Mapping) and condition.get("type") in _POD_CONDITIONS
    ]
    if conditions:
        kept_status["conditions"] = conditions
    finishes = [
        ((container.get("state") or {}).get("terminated") or {}).get("finishedAt")
        for container in status.get("containerStatuses") or ()
        if isinstance(container, Mapping)
    ]
    known = [moment for moment in finishes if isinstance(moment, str)]
    if known:
        kept_status["containerStatuses"] = [
            {"state": {"terminated": {"finishedAt": moment}}} for moment in known
        ]
    return {
        "metadata": _kept_metadata(
            pod, (SUBGROUP_LABEL, QUEUE_LABEL, node_pool_label), _POD_ANNOTATIONS
        ),
        "spec": kept_spec,
        "status": kept_status,
    }


def kept_podgroup(podgroup: ApiObject, node_pool_label: str = NODE_POOL_LABEL) -> KeptPodGroup:
    """What the bridge keeps of a PodGroup: its spec, annotations and owners (kind, name,
    uid, controller), not its status."""
    kept: KeptPodGroup = {
        "metadata": _kept_metadata(podgroup, (QUEUE_LABEL, node_pool_label), None),
        "spec": dict(podgroup_spec(podgroup)),
    }
    references = metadata(podgroup).get("ownerReferences")
    if isinstance(references, list) and references:
        kept["metadata"]["ownerReferences"] = [
            {key: ref[key] for key in ("kind", "name", "uid", "controller") if key in ref}
            for ref in references[:_MAX_OWNER_REFERENCES]
            if isinstance(ref, Mapping)
        ]
    return kept


def kept_node(node: ApiObject, node_pool_label: str = NODE_POOL_LABEL) -> KeptNode:
    """What the bridge keeps of a Node: its GPU capacity and node-pool label (not its images,
    addresses or conditions)."""
    gpu = _mapping(_mapping(node.get("status")).get("capacity")).get(GPU_RESOURCE)
    return {
        "metadata": _kept_metadata(node, (node_pool_label,), ()),
        "status": {"capacity": {} if gpu is None else {GPU_RESOURCE: gpu}},
    }


def kept_object(obj: ApiObject) -> dict[str, object]:
    """Queues, the ConfigMap and priority classes: all but status and managedFields."""
    kept = {key: value for key, value in obj.items() if key not in ("metadata", "status")}
    kept["metadata"] = _kept_metadata(obj, None, None)
    return kept
