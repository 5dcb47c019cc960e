"""``data`` models of the input event types (CONTRACT.md §1): what the cluster tells us."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import fields
from datetime import timedelta
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import (
    AfterValidator,
    Field,
    SerializerFunctionWrapHandler,
    Strict,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from minruntime.core import (
    DEFAULT_NODE_POOL,
    DEFAULT_REQUEUE_DELAY,
    DEFAULT_SUBGROUP,
    MinRuntimeConfig,
    Preemptibility,
    Queue,
    SubGroup,
)
from minruntime.core.checkpoint import MAX_CHECKPOINT_GRACE
from minruntime.core.durations import format_duration
from minruntime.core.queue_quota import QueueResources as CoreQueueResources
from minruntime.core.queue_quota import ResourceQuota
from minruntime.events.base import EventData, WireModel
from minruntime.events.types import (
    MAX_ANNOTATIONS,
    MAX_PODS,
    MAX_SUBGROUPS,
    AnnotationKey,
    AnnotationValue,
    BoundedName,
    Count,
    Duration,
    GpuAmount,
    IgnorableText,
    Label,
    MaxRequeues,
    PositiveDuration,
    Priority,
    RequeuesWindow,
    Text,
    Timestamp,
)

_DEFAULT_MIN_AVAILABLE = SubGroup().min_available
# The requeue cap's fields, by Python and wire name: omitted from a dump when unset.
_CAP_KEYS: Final = (
    "max_requeues",
    "max_requeues_window",
    "maxRequeues",
    "maxRequeuesWindow",
    "max_evictions_per_window",
    "eviction_window",
    "min_eviction_gap",
    "maxEvictionsPerWindow",
    "evictionWindow",
    "minEvictionGap",
)
# Fields added to a type after its first events, by Python and wire name: omitted from a dump
# when unset, so an event of before them dumps (and checksums) as it always did.
_QUEUE_LATER_KEYS: Final = ("node_pool", "nodePool", "priority", "resources", "annotations")
_SUBMITTED_LATER_KEYS: Final = ("top_owner", "topOwner")
# A Queue annotation's value the service reads: a count or a duration, short.
MAX_QUEUE_ANNOTATION_VALUE: Final = 64
QueueAnnotationKey = Literal[
    "minruntime.kai.scheduler/max-evictions-per-window",
    "minruntime.kai.scheduler/eviction-window",
    "minruntime.kai.scheduler/min-eviction-gap",
]
"""The Queue annotations queue.upserted carries (core.disruption.QUEUE_DISRUPTION_ANNOTATIONS)."""
QueueAnnotationValue = Annotated[
    str, Strict(), Field(min_length=1, max_length=MAX_QUEUE_ANNOTATION_VALUE)
]
_RESOURCE_KEYS: Final = ("gpu", "cpu", "memory")
_RELEASE_LATER_KEYS: Final = ("eviction",)


def _without_unset(data: dict[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """``data`` without the ``keys`` whose value is None."""
    for key in keys:
        if key in data and data[key] is None:
            del data[key]
    return data


def _duplicate_names(what: str, names: Iterable[str]) -> PydanticCustomError:
    """The error for ``names`` that are not all different (only built when they are not)."""
    duplicates = sorted(name for name, count in Counter(names).items() if count > 1)
    return PydanticCustomError(
        "duplicate_names",
        "duplicate {what} name(s): {names}",
        {"what": what, "names": ", ".join(duplicates)},
    )


# KAI's "no limit" / "no quota" value for a queue resource (pkg/common/constants: -1).
UNLIMITED: Final = -1.0
# The largest resource amount a queue may name (GPUs, millicpus or megabytes): far above any
# cluster, far below where a float stops counting whole units (2**53).
MAX_QUEUE_RESOURCE: Final = 1e15


def _unlimited_or_amount(value: float) -> float:
    if value < 0 and value != UNLIMITED:
        raise PydanticCustomError(
            "queue_amount",
            "a queue resource is >= 0, or -1 for unlimited; got {value}",
            {"value": value},
        )
    return value


QueueAmount = Annotated[
    float,
    Strict(),
    Field(ge=UNLIMITED, le=MAX_QUEUE_RESOURCE, allow_inf_nan=False),
    AfterValidator(_unlimited_or_amount),
]
"""A queue resource amount: >= 0, or -1 for KAI's "unlimited" (a JSON number)."""


class QueueResource(WireModel):
    """One resource of a KAI Queue's spec.resources: deserved quota, limit, over-quota weight."""

    quota: QueueAmount = 0.0
    """Deserved amount (GPUs in fractions, CPU in millicpus, memory in megabytes); -1 = none set."""
    limit: QueueAmount = UNLIMITED
    """Most the queue may hold; -1 = no limit."""
    over_quota_weight: Annotated[
        float, Strict(), Field(ge=0, le=MAX_QUEUE_RESOURCE, allow_inf_nan=False)
    ] = 1.0
    """Its weight when the resource left over after quotas is shared out."""

    def to_core(self) -> ResourceQuota:
        """The rule engine's ``ResourceQuota``."""
        return ResourceQuota(
            quota=self.quota, limit=self.limit, over_quota_weight=self.over_quota_weight
        )


class QueueResources(WireModel):
    """A KAI Queue's spec.resources (scheduling.run.ai/v2); an absent resource has the defaults."""

    gpu: QueueResource | None = None
    """GPUs, in fractions (0.5 = half a GPU)."""
    cpu: QueueResource | None = None
    """CPU, in millicpus."""
    memory: QueueResource | None = None
    """Memory, in megabytes (10^6 bytes)."""

    @model_serializer(mode="wrap")
    def _absent_is_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(handler(self), _RESOURCE_KEYS)

    def to_core(self) -> CoreQueueResources:
        """The rule engine's ``QueueResources`` (an absent resource stays absent)."""
        return CoreQueueResources(
            gpu=None if self.gpu is None else self.gpu.to_core(),
            cpu=None if self.cpu is None else self.cpu.to_core(),
            memory=None if self.memory is None else self.memory.to_core(),
        )


class QueueUpsertedData(EventData):
    """A queue was created or changed; mirrors the scheduling.run.ai/v2 Queue spec."""

    identity_field: ClassVar[str] = "name"
    subject_rule: ClassVar[str] = "data.name"

    name: BoundedName
    """The queue's name: its identity, and the event's subject."""
    parent_queue: BoundedName | None = None
    """The parent queue; absent, null or "" = a root queue. An unknown parent also makes a root."""
    preempt_min_runtime: Duration | None = None
    """Minimum runtime before a job of this queue can be preempted; absent or null = inherit."""
    reclaim_min_runtime: Duration | None = None
    """Minimum runtime before a job of this queue can be reclaimed; absent or null = inherit."""
    node_pool: Label | None = None
    """The node pool (scheduler shard) whose scheduler sees this queue, by KAI's shard rule;
    absent or null = every node pool (the queue is in every pool's tree)."""
    priority: Priority | None = None
    """The Queue's spec.priority (KAI's default 100 when absent): over-quota resources go
    first to queues of higher priority, and they are reclaimed last."""
    resources: QueueResources | None = None
    """The Queue's spec.resources: quotas, limits and over-quota weights; absent = none set."""
    annotations: Mapping[QueueAnnotationKey, QueueAnnotationValue] | None = None
    """The Queue's disruption overrides, by annotation name (max-evictions-per-window,
    eviction-window, min-eviction-gap under minruntime.kai.scheduler/): they replace the node
    pool's maxEvictionsPerWindow, evictionWindow and minEvictionGap for this queue. Absent =
    the pool's. A value out of bounds is ignored by the planner (counted); the bridge and
    `queues apply` check them first (docs/rule-engine.md)."""

    @model_serializer(mode="wrap")
    def _unset_is_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(handler(self), _QUEUE_LATER_KEYS)

    @field_validator("parent_queue", mode="before")
    @classmethod
    def _empty_parent_is_root(cls, value: object) -> object:
        # Kubernetes writes an unset parentQueue as "" when a Queue is round-tripped.
        return None if value == "" else value

    def to_queue(self) -> Queue:
        """The rule engine's ``Queue`` (raises the core's errors, e.g. a self-parent)."""
        return Queue(
            name=self.name,
            parent=self.parent_queue,
            preempt_min_runtime=self.preempt_min_runtime,
            reclaim_min_runtime=self.reclaim_min_runtime,
            priority=self.priority,
            resources=None if self.resources is None else self.resources.to_core(),
            node_pool=self.node_pool,
            disruption=tuple(sorted((self.annotations or {}).items())),
        )


class QueueDeletedData(EventData):
    """A queue was deleted; its children become roots."""

    identity_field: ClassVar[str] = "name"
    subject_rule: ClassVar[str] = "data.name"

    name: BoundedName
    """The queue's name."""


class ConfigUpdatedData(EventData):
    """The minruntime plugin arguments of one node pool changed; absent fields take defaults."""

    identity_field: ClassVar[str] = "node_pool"
    subject_rule: ClassVar[str] = "config/<data.nodePool>"

    node_pool: Label = DEFAULT_NODE_POOL
    """The node pool (scheduler shard) this configuration is for."""
    default_preempt_min_runtime: Duration = timedelta(0)
    """Preempt minimum runtime when no queue on the victim's path sets one."""
    default_reclaim_min_runtime: Duration = timedelta(0)
    """Reclaim minimum runtime when the resolution finds no queue value."""
    reclaim_resolve_method: Literal["lca", "queue"] = "lca"
    """How the reclaim minimum runtime is resolved (SEMANTICS.md §4)."""
    default_requeue_delay: PositiveDuration = DEFAULT_REQUEUE_DELAY
    """Cooldown after a committed requeue when the podgroup has no requeue-delay annotation."""
    max_requeues: MaxRequeues | None = None
    """The requeue cap: most committed requeues of a podgroup in the window; absent = none."""
    max_requeues_window: RequeuesWindow | None = None
    """The requeue cap's rolling window; absent = the podgroup's whole life."""
    max_evictions_per_window: int | None = Field(default=None, ge=1, le=100_000)
    """Disruption budget: most evictions of one queue's podgroups per evictionWindow."""
    eviction_window: PositiveDuration | None = None
    """The disruption budget's rolling window (with maxEvictionsPerWindow; at most 744h)."""
    min_eviction_gap: PositiveDuration | None = None
    """Least time between two evictions of gangs of one top owner (at most 168h)."""

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, value: object) -> object:
        # As for plugin arguments (MinRuntimeConfig.from_arguments), null means "the default".
        if isinstance(value, Mapping):
            return {key: item for key, item in value.items() if item is not None}
        return value

    @model_serializer(mode="wrap")
    def _unset_cap_is_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # An unset requeue cap is written as no field at all, as events before it had none.
        return _without_unset(handler(self), _CAP_KEYS)

    @property
    def subject(self) -> str:
        """``config/<nodePool>``: configuration shares the queues topic, keyed apart."""
        return f"config/{self.node_pool}"

    def to_config(self) -> MinRuntimeConfig:
        """The rule engine's ``MinRuntimeConfig`` for this node pool."""
        return MinRuntimeConfig(
            **{field.name: getattr(self, field.name) for field in fields(MinRuntimeConfig)}
        )

    @classmethod
    def from_config(cls, node_pool: str, config: MinRuntimeConfig) -> ConfigUpdatedData:
        """The config.updated data that sets ``node_pool``'s configuration to ``config``."""
        return cls.model_validate(
            {
                "nodePool": node_pool,
                **config.to_arguments(),
                # Plugin arguments are strings; on the wire the cap is a JSON integer.
                "maxRequeues": config.max_requeues,
                "maxEvictionsPerWindow": config.max_evictions_per_window,
            }
        )


class SubGroupSpec(WireModel):
    """A named set of pods that must keep minAvailable of them to be useful."""

    name: BoundedName
    """The subgroup's name, unique within the podgroup."""
    min_available: Count = _DEFAULT_MIN_AVAILABLE
    """How many of its pods must run for the subgroup to be useful (0 allowed)."""

    def to_subgroup(self) -> SubGroup:
        """The rule engine's ``SubGroup``."""
        return SubGroup(name=self.name, min_available=self.min_available)


class PodSpec(WireModel):
    """One pod of a submitted podgroup."""

    name: BoundedName
    """The pod's name, unique within the podgroup."""
    sub_group: BoundedName = DEFAULT_SUBGROUP
    """The subgroup the pod belongs to; it must be listed in subGroups."""
    gpu: GpuAmount
    """GPUs the pod requests; fractions allowed (e.g. 0.5)."""
    annotations: Mapping[AnnotationKey, AnnotationValue] | None = Field(
        default=None, max_length=MAX_ANNOTATIONS
    )
    """The pod's annotations the service reads: kai.scheduler/preemption-delay (not validated
    here: an invalid value is ignored, counted); absent or null = none."""


_DEFAULT_SUBGROUPS = (SubGroupSpec(name=DEFAULT_SUBGROUP),)


class TopOwner(WireModel):
    """A podgroup's top owner: the object at the top of its pods' owner chain (a JobSet, a
    RayJob, a PyTorchJob, a Deployment, ...), as KAI's podgrouper finds it."""

    kind: Label
    """Its kind, e.g. JobSet."""
    name: BoundedName
    """Its name (in the podgroup's namespace)."""
    uid: BoundedName
    """Its uid: the identity the eviction gap counts by."""


class PodGroupSubmittedData(EventData):
    """A podgroup (a gang of pods scheduled together) was submitted and is pending."""

    uid: BoundedName
    """The podgroup's uid: its identity, and the event's subject."""
    name: BoundedName
    """The podgroup's name."""
    namespace: Label
    """The podgroup's namespace."""
    queue: BoundedName
    """The leaf queue it is submitted to."""
    node_pool: Label = DEFAULT_NODE_POOL
    """The node pool it runs in; picks the configuration and the nodes it may use."""
    priority: Priority
    """Scheduling priority; higher is more important."""
    preemptible: bool = Field(default=True, strict=True)
    """Whether the podgroup may be preempted or requeued at all (true = preemptibility
    "preemptible", false = "non-preemptible"); preemptibility says more."""
    sub_groups: tuple[SubGroupSpec, ...] = Field(
        default=_DEFAULT_SUBGROUPS, min_length=1, max_length=MAX_SUBGROUPS
    )
    """Its subgroups; absent = one subgroup named "default" with minAvailable 1."""
    pods: tuple[PodSpec, ...] = Field(min_length=1, max_length=MAX_PODS)
    """Its pods, in any state."""
    annotations: Mapping[AnnotationKey, AnnotationValue] = Field(
        default_factory=dict, max_length=MAX_ANNOTATIONS
    )
    """Podgroup annotations, e.g. kai.scheduler/expected-runtime (not validated here)."""
    preemption_delay: IgnorableText | None = None
    """The PodGroup's spec.preemptionDelay (a duration): while it lasts after the submission
    or the last eviction, the podgroup may not be a requeue beneficiary. An invalid or
    negative value is ignored (counted in minruntime_ignored_values_total), as KAI does."""
    preemptibility: Literal["preemptible", "non-preemptible", "semi-preemptible"] | None = None
    """KAI's spec.preemptibility: preemptible, non-preemptible or semi-preemptible (each
    subgroup's minAvailable pods are never evicted). Absent: what preemptible says; both
    given, they must agree."""
    top_owner: TopOwner | None = None
    """Its top owner (the bridge: kai.scheduler/top-owner-metadata when valid, else the
    pods' controller ownerReference); absent = not known (the processor then reads the
    annotation itself)."""

    @model_serializer(mode="wrap")
    def _unset_is_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(handler(self), _SUBMITTED_LATER_KEYS)

    @model_validator(mode="after")
    def _preemptible_agrees(self) -> PodGroupSubmittedData:
        said = self.preemptibility
        if said is not None and "preemptible" not in self.model_fields_set:
            # The flag follows the value given, so the event as encoded (every field written)
            # says the same thing twice rather than contradict itself.
            object.__setattr__(self, "preemptible", Preemptibility(said).preemptible)
            return self
        if (
            said is not None
            and "preemptible" in self.model_fields_set
            # The flag says whether any pod may be evicted (the read surface's meaning):
            # true for semi-preemptible too, so an event that writes both (as the service's own
            # encoder does, the flag's default included) agrees with itself.
            and Preemptibility(said).preemptible is not self.preemptible
        ):
            raise PydanticCustomError(
                "conflicting_preemptibility",
                "preemptible {flag} contradicts preemptibility '{said}'; give one of them "
                "(preemptible false means non-preemptible; true, preemptible or "
                "semi-preemptible)",
                {"flag": "true" if self.preemptible else "false", "said": str(said)},
            )
        return self

    def resolved_preemptibility(self) -> Preemptibility:
        """preemptibility when given, else what preemptible means."""
        said = self.preemptibility
        return Preemptibility.of_flag(self.preemptible) if said is None else Preemptibility(said)

    @model_validator(mode="after")
    def _pods_match_subgroups(self) -> PodGroupSubmittedData:
        # On every submission: one set per name list, compared by size; lists only on error.
        sub_groups, pods = self.sub_groups, self.pods
        declared = {subgroup.name for subgroup in sub_groups}
        if len(declared) != len(sub_groups):
            raise _duplicate_names("subgroup", (subgroup.name for subgroup in sub_groups))
        if len({pod.name for pod in pods}) != len(pods):
            raise _duplicate_names("pod", (pod.name for pod in pods))
        used = {pod.sub_group for pod in pods}
        if not used <= declared:
            undeclared = sorted(used - declared)
            raise PydanticCustomError(
                "undeclared_subgroup",
                "pods name undeclared subgroup(s) {undeclared}; subGroups declares {declared}",
                {"undeclared": ", ".join(undeclared), "declared": ", ".join(sorted(declared))},
            )
        return self

    def to_subgroups(self) -> tuple[SubGroup, ...]:
        """The rule engine's ``SubGroup`` values, in declaration order."""
        return tuple(subgroup.to_subgroup() for subgroup in self.sub_groups)


class AllocatedPod(WireModel):
    """A pod that now holds its resources on a node."""

    name: BoundedName
    """The pod's name."""
    node: BoundedName
    """The node it was bound to."""


class PodGroupAllocatedData(EventData):
    """Pods of a podgroup now hold their resources; 0 -> 1+ allocated pods starts a run."""

    uid: BoundedName
    """The podgroup's uid."""
    pods: tuple[AllocatedPod, ...] = Field(min_length=1, max_length=MAX_PODS)
    """The pods allocated by this event."""

    @model_validator(mode="after")
    def _unique_pods(self) -> PodGroupAllocatedData:
        if len({pod.name for pod in self.pods}) != len(self.pods):
            raise _duplicate_names("pod", (pod.name for pod in self.pods))
        return self


class EvictionAttribution(WireModel):
    """Who evicted a podgroup's pods, as the scheduler said it: KAI's ``Evict`` Event on the
    PodGroup (action and evicting podgroup), its ``kai.scheduler/last-eviction-timestamp``
    annotation, or the pods' ``DisruptionTarget`` condition (time only)."""

    source: Literal["event", "annotation", "condition"]
    """Which of the three said it (an Event names the action and the evictor; the others do not)."""
    action: Label | None = None
    """The scheduler's action, lower case: KAI's evictor-action-type (preempt, reclaim,
    consolidation, stalegangeviction: pkg/scheduler/framework/interface.go) or another
    scheduler's, kept as it came; absent = not known."""
    evictor: BoundedName | None = None
    """The evicting podgroup as "namespace/name"; absent = not known."""
    evictor_queue: BoundedName | None = None
    """The evicting podgroup's queue, when the bridge knew it; absent = not known."""
    at: Timestamp | None = None
    """When the scheduler evicted (the Event's time, or the annotation's); absent = not known."""

    @field_validator("action", mode="before")
    @classmethod
    def _lower_action(cls, value: object) -> object:
        return value.lower() if isinstance(value, str) else value


class PodGroupReleasedData(EventData):
    """Pods of a podgroup released their resources; releasing all of them ends the run."""

    uid: BoundedName
    """The podgroup's uid."""
    pods: tuple[BoundedName, ...] | None = Field(default=None, min_length=1, max_length=MAX_PODS)
    """Names of the released pods; absent or null = all of them (an empty list is rejected)."""
    reason: Text | None = None
    """Why, e.g. completed, failed, evicted, requeued (free text, for the audit)."""
    eviction: EvictionAttribution | None = None
    """For a release the scheduler caused: who evicted, by which action, when; absent = not
    known (a plain release or deletion)."""

    @model_serializer(mode="wrap")
    def _unset_is_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _without_unset(handler(self), _RELEASE_LATER_KEYS)

    @model_validator(mode="after")
    def _unique_pods(self) -> PodGroupReleasedData:
        # Absent (None): every pod, nothing to compare.
        if self.pods is not None and len(set(self.pods)) != len(self.pods):
            raise _duplicate_names("pod", self.pods)
        return self


class PodGroupAnnotatedData(EventData):
    """A podgroup's annotations changed: merged into the known ones; null removes a key."""

    uid: BoundedName
    """The podgroup's uid."""
    annotations: Mapping[AnnotationKey, AnnotationValue | None] = Field(max_length=MAX_ANNOTATIONS)
    """Annotations to set (a string) or remove (null)."""


class PodGroupDeletedData(EventData):
    """A podgroup was deleted."""

    uid: BoundedName
    """The podgroup's uid."""


class NodeUpsertedData(EventData):
    """A node was added or changed."""

    identity_field: ClassVar[str] = "name"
    subject_rule: ClassVar[str] = "data.name"

    name: BoundedName
    """The node's name: its identity, and the event's subject."""
    node_pool: Label = DEFAULT_NODE_POOL
    """The node pool the node belongs to."""
    gpu: GpuAmount
    """GPU capacity of the node; fractions allowed."""


class NodeDeletedData(EventData):
    """A node was removed."""

    identity_field: ClassVar[str] = "name"
    subject_rule: ClassVar[str] = "data.name"

    name: BoundedName
    """The node's name."""


ABANDON_REASONS: Final = ("pdb", "forbidden", "not_found", "api_error", "expired")
"""Why the evictor gave a committed requeue up: a PodDisruptionBudget kept refusing (429),
the API server forbade it (403), the PodGroup is gone (404), the API server kept failing, or
its deadline passed while no evictor ran (read again after it, not carried out)."""


class RequeueAbandonedData(EventData):
    """The evictor gave up a committed requeue it could not carry out by its deadline."""

    uid: BoundedName
    """The podgroup's uid."""
    decision: BoundedName
    """The ``requeue.committed`` event's id."""
    reason: Literal["pdb", "forbidden", "not_found", "api_error", "expired"]
    """What kept it from being carried out (``ABANDON_REASONS``)."""
    nominated_by: tuple[BoundedName, ...] = Field(min_length=1, max_length=MAX_SUBGROUPS)
    """The decision's nominators (carried so the decision log row needs nothing else)."""
    requeue_not_before: Timestamp
    """The cooldown the decision wrote: cleared again unless a later decision replaced it."""
    decided_at: Timestamp
    """When the decision was committed."""
    deadline: Timestamp
    """By when it had to be carried out."""
    message: Text | None = None
    """The API server's last answer, one line."""


class RequeueCheckpointData(EventData):
    """The evictor asked a podgroup for a checkpoint before evicting it (the handshake's end)."""

    uid: BoundedName
    """The podgroup's uid."""
    decision: BoundedName
    """The ``requeue.committed`` event's id."""
    outcome: Literal["acknowledged", "timed_out", "gone"]
    """How the wait ended (``CHECKPOINT_OUTCOMES``): the workload wrote a ``checkpointed-at``
    at or after the request, the grace ran out first, or the PodGroup was deleted meanwhile."""
    requested_at: Timestamp
    """The ``checkpoint-requested-at`` the evictor wrote on the PodGroup."""
    grace: PositiveDuration
    """The podgroup's ``checkpoint-grace`` (at most ``MAX_CHECKPOINT_GRACE``)."""
    ended_at: Timestamp
    """When the wait ended (the eviction follows it)."""
    checkpointed_at: Timestamp | None = None
    """The workload's ``checkpointed-at`` that answered (acknowledged only)."""

    @model_validator(mode="after")
    def _bounded(self) -> RequeueCheckpointData:
        if self.grace > MAX_CHECKPOINT_GRACE:
            raise PydanticCustomError(
                "grace_too_long",
                "grace {grace} is longer than {bound}",
                {"grace": format_duration(self.grace), "bound": "30m"},
            )
        if self.ended_at < self.requested_at:
            raise PydanticCustomError("ended_before_requested", "endedAt is before requestedAt")
        if (self.checkpointed_at is None) == (self.outcome == "acknowledged"):
            raise PydanticCustomError(
                "checkpointed_at_mismatch",
                "checkpointedAt is given exactly when the outcome is acknowledged",
            )
        return self


class RequeueNominatedData(EventData):
    """A component asks for a running podgroup to be requeued (if that lets better work run)."""

    uid: BoundedName
    """The nominated podgroup's uid."""
    nominated_by: BoundedName
    """The nominating component, e.g. proportion or expectedruntime."""
    reason: Text | None = None
    """Free text for the audit."""
