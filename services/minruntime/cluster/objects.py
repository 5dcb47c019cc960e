"""The words of the cluster side: the kinds it watches, the actions a watch reports, the
objects as the API server sends them and as the bridge keeps them.

An object of the API server is JSON read defensively (``ApiObject``: every field may be
absent or of another type; ``mapping`` checks each one it reads). What the bridge keeps of it
(``mapping.kept_pod`` and the others) has the same keys and nesting, so every mapping function
reads a kept object as it reads the API server's, and is typed below: a pod of 2-3 KB of JSON
becomes a few hundred bytes. Kept objects stay plain dicts at run time: they are held packed
(``cluster.packed``, ``marshal``), a tenth of the memory of the dicts themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypedDict

ApiObject = Mapping[str, Any]
"""An object (or a part of one) as the API server sends it: JSON, every field unchecked."""


class Kind(StrEnum):
    """The object kinds the bridge watches."""

    PRIORITY_CLASS = "PriorityClass"
    CONFIG_MAP = "ConfigMap"
    QUEUE = "Queue"
    NODE = "Node"
    POD_GROUP = "PodGroup"
    EVENT = "Event"  # KAI's Evict Events on PodGroups (cluster.evictions)
    POD = "Pod"


class Action(StrEnum):
    """What a watch notification says happened to an object (a listing's items: MODIFIED)."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"


class Kept(dict[str, Any]):
    """An object reduced to what the bridge keeps (``mirror.kept``): not reduced again."""


class ManagedTime(TypedDict):
    """The one managedFields entry kept: the newest time (``mapping.changed_at``)."""

    time: str


class KeptMetadata(TypedDict, total=False):
    """metadata's identity, times and versions, and the labels and annotations read."""

    uid: str
    name: str
    namespace: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    deletionGracePeriodSeconds: int
    managedFields: list[ManagedTime]
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[dict[str, object]]


class KeptContainer(TypedDict):
    """A container's nvidia.com/gpu limits and requests (``resources.limits``, ...)."""

    resources: dict[str, dict[str, object]]


class KeptPodSpec(TypedDict, total=False):
    """spec: the containers' GPUs and the node the pod is bound to."""

    containers: list[KeptContainer]
    nodeName: str


class KeptCondition(TypedDict):
    """A PodScheduled or DisruptionTarget condition."""

    type: object
    status: object
    lastTransitionTime: object


class KeptPodStatus(TypedDict, total=False):
    """status: the phase and why, the start, the two conditions read, the finish times."""

    phase: str
    reason: str
    startTime: str
    conditions: list[KeptCondition]
    containerStatuses: list[dict[str, dict[str, dict[str, str]]]]


class KeptPod(TypedDict):
    """What the bridge keeps of a pod."""

    metadata: KeptMetadata
    spec: KeptPodSpec
    status: KeptPodStatus


class KeptPodGroup(TypedDict):
    """What the bridge keeps of a PodGroup: its spec, annotations and owners."""

    metadata: KeptMetadata
    spec: dict[str, object]


class KeptNodeStatus(TypedDict):
    """status: the node's nvidia.com/gpu capacity (if it has one)."""

    capacity: dict[str, object]


class KeptNode(TypedDict):
    """What the bridge keeps of a Node."""

    metadata: KeptMetadata
    status: KeptNodeStatus
