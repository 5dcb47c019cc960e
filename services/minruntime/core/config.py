"""Plugin configuration per node pool (SEMANTICS.md §3)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from types import MappingProxyType
from typing import Final, TypeVar

from minruntime.core.disruption import (
    ARG_EVICTION_WINDOW,
    ARG_MAX_EVICTIONS_PER_WINDOW,
    ARG_MIN_EVICTION_GAP,
    DisruptionPolicy,
    check_count,
    check_duration,
    parse_config_duration,
    parse_count,
    parse_max_evictions,
)
from minruntime.core.durations import format_duration
from minruntime.core.errors import InvalidConfigError

DEFAULT_NODE_POOL: Final = "default"
_T = TypeVar("_T")

# How long a requeued podgroup is left alone before it may be nominated again, when neither
# its annotation nor the configuration says otherwise: long enough to let the beneficiary
# start, short enough that an over-running job is reconsidered within the hour.
DEFAULT_REQUEUE_DELAY: Final = timedelta(minutes=5)

# Bounds of the requeue cap (SEMANTICS.md §10): far above any useful cap or window, and low
# enough that the worker reads at most this many requeue times per podgroup.
MAX_REQUEUES: Final = 1000
MAX_REQUEUES_WINDOW: Final = timedelta(days=366)


class ReclaimResolveMethod(StrEnum):
    """How the reclaim minimum runtime is resolved between two queues."""

    LCA = "lca"
    QUEUE = "queue"


# The KAI plugin argument names (and the config.updated field names).
ARG_DEFAULT_PREEMPT_MIN_RUNTIME: Final = "defaultPreemptMinRuntime"
ARG_DEFAULT_RECLAIM_MIN_RUNTIME: Final = "defaultReclaimMinRuntime"
ARG_RECLAIM_RESOLVE_METHOD: Final = "reclaimResolveMethod"
ARG_DEFAULT_REQUEUE_DELAY: Final = "defaultRequeueDelay"
ARG_MAX_REQUEUES: Final = "maxRequeues"
ARG_MAX_REQUEUES_WINDOW: Final = "maxRequeuesWindow"
KNOWN_ARGUMENTS: Final = frozenset(
    {
        ARG_DEFAULT_PREEMPT_MIN_RUNTIME,
        ARG_DEFAULT_RECLAIM_MIN_RUNTIME,
        ARG_RECLAIM_RESOLVE_METHOD,
        ARG_DEFAULT_REQUEUE_DELAY,
        ARG_MAX_REQUEUES,
        ARG_MAX_REQUEUES_WINDOW,
        ARG_MAX_EVICTIONS_PER_WINDOW,
        ARG_EVICTION_WINDOW,
        ARG_MIN_EVICTION_GAP,
    }
)


def check_max_requeues(value: object, label: str = ARG_MAX_REQUEUES) -> int:
    """Return ``value`` if it is a whole number in [1, MAX_REQUEUES]; else InvalidConfigError."""
    return check_count(value, label, MAX_REQUEUES)


def check_requeues_window(value: object, label: str = ARG_MAX_REQUEUES_WINDOW) -> timedelta:
    """Return ``value`` if it is in (0, MAX_REQUEUES_WINDOW]; InvalidConfigError if not."""
    return check_duration(value, label, MAX_REQUEUES_WINDOW)


def parse_max_requeues(text: str, label: str = ARG_MAX_REQUEUES) -> int:
    """Parse a cap written as decimal digits (a plugin argument or an annotation)."""
    return check_max_requeues(parse_count(text, label, MAX_REQUEUES), label)


def _duration(arguments: Mapping[str, str | None], argument: str, default: _T) -> timedelta | _T:
    text = arguments.get(argument)
    return default if text is None else parse_config_duration(text, argument)


@dataclass(frozen=True, kw_only=True, slots=True)
class MinRuntimeConfig:
    """The minruntime plugin arguments of one node pool."""

    default_preempt_min_runtime: timedelta = timedelta(0)
    default_reclaim_min_runtime: timedelta = timedelta(0)
    reclaim_resolve_method: str = ReclaimResolveMethod.LCA
    default_requeue_delay: timedelta = DEFAULT_REQUEUE_DELAY
    # The requeue cap (SEMANTICS.md §10): None = unlimited; a cap without a window counts
    # every committed requeue of the podgroup (its whole life).
    max_requeues: int | None = None
    max_requeues_window: timedelta | None = None
    # Disruption budgets and pacing (core.disruption): None = off.
    max_evictions_per_window: int | None = None
    eviction_window: timedelta | None = None
    min_eviction_gap: timedelta | None = None

    @property
    def disruption(self) -> DisruptionPolicy:
        """The pool's disruption budget and pacing."""
        return DisruptionPolicy(
            self.max_evictions_per_window, self.eviction_window, self.min_eviction_gap
        )

    def __post_init__(self) -> None:
        for label, value in (
            (ARG_DEFAULT_PREEMPT_MIN_RUNTIME, self.default_preempt_min_runtime),
            (ARG_DEFAULT_RECLAIM_MIN_RUNTIME, self.default_reclaim_min_runtime),
            (ARG_DEFAULT_REQUEUE_DELAY, self.default_requeue_delay),
        ):
            if not isinstance(value, timedelta):
                raise InvalidConfigError(f"{label} must be a duration, got {value!r}")
            if value < timedelta(0):
                raise InvalidConfigError(
                    f"{label} must not be negative, got -{format_duration(-value)}"
                )
        if self.default_requeue_delay == timedelta(0):
            # A zero delay would let a requeued job be nominated again in the same instant.
            raise InvalidConfigError(f"{ARG_DEFAULT_REQUEUE_DELAY} must be positive, got 0s")
        methods = [method.value for method in ReclaimResolveMethod]
        if self.reclaim_resolve_method not in methods:
            raise InvalidConfigError(
                f"{ARG_RECLAIM_RESOLVE_METHOD} must be one of {', '.join(methods)}, "
                f"got {self.reclaim_resolve_method!r}"
            )
        if self.max_requeues is not None:
            check_max_requeues(self.max_requeues)
        if self.max_requeues_window is not None:
            check_requeues_window(self.max_requeues_window)
        _ = self.disruption  # checks the budget and the gap (one-line errors)
        # Normalise to the enum member so comparisons and repr are uniform.
        object.__setattr__(
            self, "reclaim_resolve_method", ReclaimResolveMethod(self.reclaim_resolve_method)
        )

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, str | None]) -> MinRuntimeConfig:
        """Build a config from KAI plugin arguments; absent or null ones take the defaults."""
        unknown = sorted(set(arguments) - KNOWN_ARGUMENTS)
        if unknown:
            raise InvalidConfigError(
                f"unknown minruntime argument(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(KNOWN_ARGUMENTS))}"
            )
        defaults = cls()
        method = arguments.get(ARG_RECLAIM_RESOLVE_METHOD)
        cap = arguments.get(ARG_MAX_REQUEUES)
        budget = arguments.get(ARG_MAX_EVICTIONS_PER_WINDOW)
        return cls(
            default_preempt_min_runtime=_duration(
                arguments, ARG_DEFAULT_PREEMPT_MIN_RUNTIME, defaults.default_preempt_min_runtime
            ),
            default_reclaim_min_runtime=_duration(
                arguments, ARG_DEFAULT_RECLAIM_MIN_RUNTIME, defaults.default_reclaim_min_runtime
            ),
            reclaim_resolve_method=defaults.reclaim_resolve_method if method is None else method,
            default_requeue_delay=_duration(
                arguments, ARG_DEFAULT_REQUEUE_DELAY, defaults.default_requeue_delay
            ),
            max_requeues=None if cap is None else parse_max_requeues(cap),
            max_requeues_window=_duration(arguments, ARG_MAX_REQUEUES_WINDOW, None),
            max_evictions_per_window=None if budget is None else parse_max_evictions(budget),
            eviction_window=_duration(arguments, ARG_EVICTION_WINDOW, None),
            min_eviction_gap=_duration(arguments, ARG_MIN_EVICTION_GAP, None),
        )

    def to_arguments(self) -> dict[str, str]:
        """Return the config as KAI plugin arguments (the inverse of from_arguments).

        The requeue cap's arguments are left out when unset (absent = unlimited).
        """
        values: dict[str, timedelta | int | str | None] = {
            ARG_DEFAULT_PREEMPT_MIN_RUNTIME: self.default_preempt_min_runtime,
            ARG_DEFAULT_RECLAIM_MIN_RUNTIME: self.default_reclaim_min_runtime,
            ARG_RECLAIM_RESOLVE_METHOD: self.reclaim_resolve_method,
            ARG_DEFAULT_REQUEUE_DELAY: self.default_requeue_delay,
            ARG_MAX_REQUEUES: self.max_requeues,
            ARG_MAX_REQUEUES_WINDOW: self.max_requeues_window,
            ARG_MAX_EVICTIONS_PER_WINDOW: self.max_evictions_per_window,
            ARG_EVICTION_WINDOW: self.eviction_window,
            ARG_MIN_EVICTION_GAP: self.min_eviction_gap,
        }
        return {
            argument: format_duration(value) if isinstance(value, timedelta) else str(value)
            for argument, value in values.items()
            if value is not None
        }


@dataclass(frozen=True, slots=True)
class NodePoolConfigs:
    """Configuration keyed by node pool.

    A pool without its own entry uses the ``default`` pool's entry, and the built-in
    MinRuntimeConfig() when there is none: a shard nobody configured behaves like KAI's
    defaults, and configuring ``default`` changes every unconfigured shard at once.
    """

    by_pool: Mapping[str, MinRuntimeConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_pool", MappingProxyType(dict(self.by_pool)))

    def for_pool(self, node_pool: str | None) -> MinRuntimeConfig:
        """Return the config in force for ``node_pool`` (None means the default pool)."""
        pool = node_pool or DEFAULT_NODE_POOL
        found = self.by_pool.get(pool) or self.by_pool.get(DEFAULT_NODE_POOL)
        return found if found is not None else MinRuntimeConfig()

    def __iter__(self) -> Iterator[str]:
        return iter(self.by_pool)

    def __len__(self) -> int:
        return len(self.by_pool)
