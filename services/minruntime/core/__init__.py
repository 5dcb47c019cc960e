"""The pure rule engine of minruntime: standard library only, no I/O, no clock reads."""

from minruntime.core.annotations import (
    EXPECTED_RUNTIME_ANNOTATION,
    EXPECTED_RUNTIME_PLUGIN,
    REQUEUE_DELAY_ANNOTATION,
    REQUEUE_NOT_BEFORE_ANNOTATION,
)
from minruntime.core.config import (
    DEFAULT_NODE_POOL,
    DEFAULT_REQUEUE_DELAY,
    MinRuntimeConfig,
    NodePoolConfigs,
    ReclaimResolveMethod,
)
from minruntime.core.cooldown import in_cooldown, requeue_delay, requeue_not_before
from minruntime.core.durations import MAX_DURATION, format_duration, parse_duration
from minruntime.core.elastic import (
    DEFAULT_SUBGROUP,
    PodGroupPods,
    ScenarioVerdict,
    SubGroup,
    VictimEviction,
    evictable_pods,
    is_elastic,
    passes_victim_filter,
    validate_scenario,
)
from minruntime.core.errors import (
    DuplicateQueueError,
    InvalidConfigError,
    InvalidDurationError,
    InvalidPodGroupError,
    InvalidQueueError,
    InvalidTimestampError,
    MinRuntimeError,
    NegativeDurationError,
    QueueCycleError,
)
from minruntime.core.nomination import (
    NominationCandidate,
    NominationVerdict,
    SkipReason,
    nominate,
)
from minruntime.core.protection import is_protected, protected_until, remaining_protection
from minruntime.core.queue_tree import Queue, QueueTree
from minruntime.core.resolution import Resolution, ResolutionKind, ResolutionTrace, Resolver
from minruntime.core.start_time import (
    NOT_STARTED,
    AllocationEvent,
    AllocationKind,
    RunState,
    apply_allocated,
    apply_released,
    fold_history,
    start_time_of,
)
from minruntime.core.timestamps import format_rfc3339, parse_rfc3339

__all__ = [
    "DEFAULT_NODE_POOL",
    "DEFAULT_REQUEUE_DELAY",
    "DEFAULT_SUBGROUP",
    "EXPECTED_RUNTIME_ANNOTATION",
    "EXPECTED_RUNTIME_PLUGIN",
    "MAX_DURATION",
    "NOT_STARTED",
    "REQUEUE_DELAY_ANNOTATION",
    "REQUEUE_NOT_BEFORE_ANNOTATION",
    "AllocationEvent",
    "AllocationKind",
    "DuplicateQueueError",
    "InvalidConfigError",
    "InvalidDurationError",
    "InvalidPodGroupError",
    "InvalidQueueError",
    "InvalidTimestampError",
    "MinRuntimeConfig",
    "MinRuntimeError",
    "NegativeDurationError",
    "NodePoolConfigs",
    "NominationCandidate",
    "NominationVerdict",
    "PodGroupPods",
    "Queue",
    "QueueCycleError",
    "QueueTree",
    "ReclaimResolveMethod",
    "Resolution",
    "ResolutionKind",
    "ResolutionTrace",
    "Resolver",
    "RunState",
    "ScenarioVerdict",
    "SkipReason",
    "SubGroup",
    "VictimEviction",
    "apply_allocated",
    "apply_released",
    "evictable_pods",
    "fold_history",
    "format_duration",
    "format_rfc3339",
    "in_cooldown",
    "is_elastic",
    "is_protected",
    "nominate",
    "parse_duration",
    "parse_rfc3339",
    "passes_victim_filter",
    "protected_until",
    "remaining_protection",
    "requeue_delay",
    "requeue_not_before",
    "start_time_of",
    "validate_scenario",
]
