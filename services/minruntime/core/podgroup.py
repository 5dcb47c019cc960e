"""A podgroup as the projection keeps it: an immutable state and the pure fold of its events.

``fold(state, change)`` applies one podgroup event (a ``Submission``, ``Allocation``,
``Release``, ``Annotation`` or ``Deletion``, made from the wire event by ``ingest``) and returns
the next state; the state it was given is never changed, and a change that changes nothing
returns the very same state. The derived values the store writes (status, running pods,
elasticity, evictable pods, the parsed annotations, ``awaiting_release`` as stored) are
computed from a state on demand, once per write, not on every event.

Rules (SEMANTICS.md §5 and §6, docs/storage.md):
- an event for a podgroup not submitted yet makes a placeholder (``spec`` None);
- a submission replaces the spec (and the listed pods' subgroup and gpu), keeps the
  allocations, the nodes and the start time; allocated pods it does not list stay, in the
  fallback subgroup (``default`` when there is one or none is declared, else the first);
  its annotations win over ones seen before, others stay; ``submitted_at`` is the first one's;
- 0 -> 1+ allocated pods starts a run at the event's time; scale-up keeps the start;
  releasing the last pod ends the run (and clears ``awaiting_release``);
- a null annotation value removes the key; deleted is sticky;
- a new ``checkpointed-at`` that is not RFC3339, after the event's time or before the running
  run's start is ignored: the one held before stays (core.checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from operator import itemgetter
from types import MappingProxyType
from typing import Final, NamedTuple

from minruntime.core.annotations import (
    EXPECTED_RUNTIME_ANNOTATION,
    MAX_REQUEUES_ANNOTATION,
    REQUEUE_NOT_BEFORE_ANNOTATION,
)
from minruntime.core.checkpoint import kept_checkpoint, read_checkpoint_grace, refused_checkpoint
from minruntime.core.config import DEFAULT_NODE_POOL, parse_max_requeues
from minruntime.core.disruption import TOP_OWNER_ANNOTATION, TopOwner, read_top_owner
from minruntime.core.durations import read_duration
from minruntime.core.elastic import DEFAULT_SUBGROUP, SubGroup, protected_elasticity
from minruntime.core.errors import MinRuntimeError
from minruntime.core.evictions import EVICTIONS, Attribution, ended_by_reason
from minruntime.core.preemptibility import Preemptibility
from minruntime.core.preemption_delay import (
    LAST_EVICTION_ANNOTATION,
    PREEMPTION_DELAY_ANNOTATION,
    DelayWindow,
    IgnoredValue,
    PreemptionDelay,
    delay_window,
    last_eviction,
    last_eviction_annotation,
    resolve_delay,
    submitted_delay,
    valid_delay,
)
from minruntime.core.start_time import RunState, apply_allocated, apply_released
from minruntime.core.timestamps import read_time_between


class MemberPod(NamedTuple):
    """One pod of a podgroup; ``gpu`` is unknown (None) until a submission lists the pod.

    A named tuple: cheaper to make than a frozen dataclass, and the garbage collector stops
    tracking a tuple of plain values (a batch keeps thousands of them).
    """

    subgroup: str
    gpu: float | Decimal | None = None


_NO_PODS: Final[Mapping[str, MemberPod]] = MappingProxyType({})
# A MemberPod's subgroup (its first field).
_SUBGROUP_OF: Final[Callable[[MemberPod], str]] = itemgetter(0)
_NO_NODES: Final[Mapping[str, str | None]] = MappingProxyType({})
_NO_ANNOTATIONS: Final[Mapping[str, str]] = MappingProxyType({})


class PodGroupSpec(NamedTuple):
    """What the latest submission said about the podgroup (its pods aside)."""

    name: str
    namespace: str
    queue: str
    node_pool: str
    priority: int
    preemptibility: Preemptibility
    # In declaration order: the first is the fallback when none is named ``default``.
    subgroups: tuple[SubGroup, ...]
    # The preemption delay the submission set apart from the podgroup annotation: its spec's
    # valid value, else its pods' first valid annotation (core.preemption_delay).
    submitted_delay: PreemptionDelay | None = None
    # Its top owner as the submission said it (``topOwner``; None: not said, the
    # kai.scheduler/top-owner-metadata annotation is read instead: ``owner_of``).
    owner: TopOwner | None = None


class PodGroupState(NamedTuple):
    """One podgroup after the events folded so far (a placeholder until it is submitted)."""

    # Few objects per state, on purpose: the processor folds every event into a new state,
    # and each object a state holds is garbage-collector work once the state is replaced.
    # The mappings are never changed once made (typed read-only; the fold builds a new one
    # for each change): plain dicts, as a proxy per change costs collector time too.
    # A named tuple, like the change values below: immutable as a frozen dataclass, and much
    # cheaper to make (a frozen dataclass pays one object.__setattr__ per field), which every
    # folded event pays (docs/benchmarks.md, "Figures behind the code's choices").
    uid: str
    spec: PodGroupSpec | None = None
    # Pods holding resources (releasing ones included) -> the node each holds them on.
    allocated: Mapping[str, str | None] = _NO_NODES
    # The run (``RunState``, SEMANTICS.md §5): start_time is set while running.
    start_time: datetime | None = None
    last_start_time: datetime | None = None
    ended_at: datetime | None = None
    # Pod name -> pod: the submission's pods in its order, then pods known only from
    # allocations.
    pods: Mapping[str, MemberPod] = _NO_PODS
    annotations: Mapping[str, str] = _NO_ANNOTATIONS
    # Event time of the first submission (contenders of equal priority: oldest first).
    submitted_at: datetime | None = None
    deleted: bool = False
    # A committed requeue of the current run waits for the cluster to release it (set by
    # the requeue worker in the store, cleared here when the run ends).
    awaiting_release: bool = False
    # The end of the last run an eviction ended (core.evictions): re-arms the preemption delay.
    evicted_at: datetime | None = None
    # KAI's last-eviction-timestamp annotation as validated when it arrived (None: absent or
    # ignored).
    eviction_annotated_at: datetime | None = None

    @property
    def run(self) -> RunState:
        """The run as the start-time rules see it (made on each call)."""
        return RunState(
            frozenset(self.allocated), self.start_time, self.last_start_time, self.ended_at
        )

    @property
    def submitted(self) -> bool:
        """False for a placeholder: an event arrived before the submission."""
        return self.spec is not None

    @property
    def node_pool(self) -> str:
        """The submission's node pool (the default pool for a placeholder)."""
        return DEFAULT_NODE_POOL if self.spec is None else self.spec.node_pool

    @property
    def preemptibility(self) -> Preemptibility:
        """The submission's preemptibility (preemptible for a placeholder)."""
        return Preemptibility.PREEMPTIBLE if self.spec is None else self.spec.preemptibility

    @property
    def preemptible(self) -> bool:
        """Some of its pods may be evicted: not non-preemptible (True for a placeholder)."""
        return self.spec is None or self.spec.preemptibility is not Preemptibility.NON_PREEMPTIBLE

    @property
    def subgroups(self) -> tuple[SubGroup, ...]:
        """The declared subgroups (none for a placeholder)."""
        return () if self.spec is None else self.spec.subgroups

    @property
    def fallback_subgroup(self) -> str:
        """Where a pod the submission did not list is counted."""
        return fallback_subgroup(self.subgroups)

    @property
    def status(self) -> str:
        """pending | running | finished | deleted, as the podgroups view shows it."""
        if self.deleted:
            return "deleted"
        if self.allocated:
            return "running"
        if self.last_start_time is None:
            return "pending"
        # A run an eviction ended (evicted, preempted, requeued) leaves the gang waiting to be
        # scheduled again, as in KAI: pending, a possible beneficiary again (with its
        # preemption delay re-armed). Any other end leaves it finished.
        evicted = self.evicted_at
        return "pending" if evicted is not None and evicted == self.ended_at else "finished"

    @property
    def running_pods(self) -> int:
        """The number of pods holding resources (releasing pods included)."""
        return len(self.allocated)

    @property
    def stored_awaiting_release(self) -> bool:
        """``awaiting_release`` as stored: only a running podgroup can wait for its release."""
        return self.awaiting_release and self.status == "running"

    @property
    def expected_runtime(self) -> timedelta | None:
        """The expected-runtime annotation, parsed (None when absent or invalid)."""
        return read_duration(self.annotations.get(EXPECTED_RUNTIME_ANNOTATION))

    @property
    def requeue_not_before(self) -> datetime | None:
        """The requeue-not-before annotation, parsed (None when absent or invalid)."""
        return read_time_between(self.annotations.get(REQUEUE_NOT_BEFORE_ANNOTATION), None, None)

    @property
    def preemption_delay(self) -> PreemptionDelay | None:
        """The preemption delay in force (spec, else annotation, else pods); None: no delay."""
        submitted = None if self.spec is None else self.spec.submitted_delay
        return resolve_delay(submitted, self.annotations.get(PREEMPTION_DELAY_ANNOTATION))

    def delay_window(self) -> DelayWindow | None:
        """The preemption-delay window (from the submission or the last eviction), if any."""
        evicted = last_eviction(self.evicted_at, self.eviction_annotated_at)
        return delay_window(self.preemption_delay, self.submitted_at, evicted)

    def elasticity(self) -> tuple[bool, int]:
        """(is_elastic, running pods it may lose while protected), from §6."""
        if self.spec is None:
            # Unknown gang shape: treated as a non-elastic gang, the side that protects.
            return False, 0
        # The fold keeps every pod in a declared subgroup (the fallback is one once a
        # submission declared any), so the one-pass count applies.
        # The subgroups taken in C (map, itemgetter): no generator frame per pod; every
        # podgroup written pays it (issue 30).
        pods = self.pods
        return protected_elasticity(
            self.spec.subgroups,
            map(_SUBGROUP_OF, pods.values()),
            map(_SUBGROUP_OF, map(pods.__getitem__, self.allocated)),
        )


def owner_of(state: PodGroupState) -> TopOwner | None:
    """The podgroup's top owner: the submission's ``topOwner``, else KAI's
    ``kai.scheduler/top-owner-metadata`` annotation when it reads (None: neither)."""
    if state.spec is not None and state.spec.owner is not None:
        return state.spec.owner
    return read_top_owner(state.annotations).owner


class Submission(NamedTuple):
    """``podgroup.submitted``: the spec and pods, in the event's order."""

    name: str
    namespace: str
    queue: str
    node_pool: str | None
    priority: int
    preemptibility: Preemptibility
    subgroups: tuple[SubGroup, ...]
    # (pod name, subgroup, gpu)
    pods: tuple[tuple[str, str, float], ...]
    annotations: Mapping[str, str]
    at: datetime
    # spec.preemptionDelay as sent (validated by the fold: an invalid value is ignored).
    preemption_delay: str | None = None
    # (pod name, its preemption-delay annotation) for the pods that carry one, in pod order.
    pod_preemption_delays: tuple[tuple[str, str], ...] = ()
    # topOwner as sent (None: absent).
    owner: TopOwner | None = None


class Allocation(NamedTuple):
    """``podgroup.allocated``: (pod name, node) pairs that now hold resources."""

    pods: tuple[tuple[str, str], ...]
    at: datetime


class Release(NamedTuple):
    """``podgroup.released``: pod names (None: all) that released their resources."""

    pods: tuple[str, ...] | None
    at: datetime
    # Why (free text: completed, failed, evicted, requeued, ...); what a run's end is called.
    reason: str | None = None
    # Who evicted, when the scheduler said so: the run it ends is ``evicted`` (core.evictions).
    eviction: Attribution | None = None


class Annotation(NamedTuple):
    """``podgroup.annotated``: annotations to set, or (None) to remove."""

    changes: Mapping[str, str | None]
    # The event's time: a last-eviction-timestamp after it is ignored (None: not checked).
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Deletion:
    """``podgroup.deleted``."""


class Abandonment(NamedTuple):
    """``requeue.abandoned``: the cluster gave up a committed requeue (its deadline passed).

    The run is no longer awaiting its release, and the cooldown the decision wrote
    (``not_before``) is cleared, unless a later decision or the cluster replaced it."""

    not_before: datetime


def fallback_subgroup(subgroups: tuple[SubGroup, ...]) -> str:
    """``default`` when it is declared or nothing is; else the first declared subgroup."""
    if not subgroups or any(sub.name == DEFAULT_SUBGROUP for sub in subgroups):
        return DEFAULT_SUBGROUP
    return subgroups[0].name


PodGroupChange = Submission | Allocation | Release | Annotation | Deletion | Abandonment


class _Keep:
    """``_with``'s "unchanged" for a field whose None is a value."""


_KEEP: Final = _Keep()


def fold(state: PodGroupState, change: PodGroupChange) -> PodGroupState:
    """The podgroup after ``change``; ``state`` itself when nothing changes."""
    if isinstance(change, Allocation):
        return _allocate(state, change)
    if isinstance(change, Release):
        return _release(state, change)
    if isinstance(change, Submission):
        return _submit(state, change)
    if isinstance(change, Annotation):
        return _annotate(state, change)
    if isinstance(change, Abandonment):
        return _abandon(state, change)
    if state.deleted:
        return state
    return _with(state, deleted=True)


def _with(
    state: PodGroupState,
    *,
    spec: PodGroupSpec | None = None,
    allocated: Mapping[str, str | None] | None = None,
    run: RunState | None = None,
    pods: Mapping[str, MemberPod] | None = None,
    annotations: Mapping[str, str] | None = None,
    submitted_at: datetime | None = None,
    deleted: bool | None = None,
    awaiting_release: bool | None = None,
    evicted_at: datetime | None = None,
    eviction_annotated_at: datetime | _Keep | None = _KEEP,
) -> PodGroupState:
    # The named tuple's _replace costs more (it maps the keywords over the fields in Python).
    return PodGroupState(
        state.uid,
        state.spec if spec is None else spec,
        state.allocated if allocated is None else allocated,
        state.start_time if run is None else run.start_time,
        state.last_start_time if run is None else run.last_start_time,
        state.ended_at if run is None else run.ended_at,
        state.pods if pods is None else pods,
        state.annotations if annotations is None else annotations,
        state.submitted_at if submitted_at is None else submitted_at,
        state.deleted if deleted is None else deleted,
        state.awaiting_release if awaiting_release is None else awaiting_release,
        state.evicted_at if evicted_at is None else evicted_at,
        state.eviction_annotated_at
        if isinstance(eviction_annotated_at, _Keep)
        else eviction_annotated_at,
    )


def _submit(state: PodGroupState, change: Submission) -> PodGroupState:
    # Last declaration of a repeated name wins, in the place of the first (a dict's rule).
    subgroups = tuple({sub.name: sub for sub in change.subgroups}.values())
    spec = PodGroupSpec(
        change.name,
        change.namespace,
        change.queue,
        change.node_pool or DEFAULT_NODE_POOL,
        change.priority,
        change.preemptibility,
        subgroups,
        submitted_delay(change.preemption_delay, change.pod_preemption_delays),
        change.owner,
    )
    pods = {name: MemberPod(subgroup, gpu) for name, subgroup, gpu in change.pods}
    # Pods allocated before the submission named them stay, in the fallback subgroup:
    # dropping them would lose capacity that is really in use.
    unlisted = state.allocated.keys() - pods.keys()
    if unlisted:
        fallback = fallback_subgroup(subgroups)
        for name in sorted(unlisted):
            pods[name] = MemberPod(fallback)
    submitted_at = change.at if state.submitted_at is None else state.submitted_at
    eviction: datetime | _Keep | None = _KEEP
    if LAST_EVICTION_ANNOTATION in change.annotations:
        eviction = last_eviction_annotation(
            change.annotations[LAST_EVICTION_ANNOTATION], change.at, submitted_at
        )
    annotations = {**state.annotations, **change.annotations}
    if refused_checkpoint(change.annotations, state.annotations, change.at, state.start_time):
        annotations = kept_checkpoint(annotations, state.annotations)
    return _with(
        state,
        spec=spec,
        pods=pods,
        annotations=annotations,
        submitted_at=submitted_at,
        eviction_annotated_at=eviction,
    )


def _allocate(state: PodGroupState, change: Allocation) -> PodGroupState:
    # The rules are apply_allocated's; its RunState values are temporary (collected young).
    run = apply_allocated(state.run, (name for name, _ in change.pods), change.at)
    pods: dict[str, MemberPod] | None = None
    allocated: dict[str, str | None] | None = None
    for name, node in change.pods:
        if name not in (state.pods if pods is None else pods):
            if pods is None:
                pods = dict(state.pods)
            pods[name] = MemberPod(state.fallback_subgroup)
        held = state.allocated if allocated is None else allocated
        if name not in held or held[name] != node:
            if allocated is None:
                allocated = dict(state.allocated)
            allocated[name] = node
    if allocated is None:
        # Every pod already held resources on that node: a redelivered allocation.
        return state
    return _with(state, allocated=allocated, run=run, pods=pods)


def _release(state: PodGroupState, change: Release) -> PodGroupState:
    before = state.run
    run = apply_released(before, change.pods, change.at)
    # The run a requeue was committed for is over: the next run starts afresh.
    awaiting = state.awaiting_release and bool(run.allocated)
    if run is before:
        return state if awaiting == state.awaiting_release else _with(state, awaiting_release=False)
    held = run.allocated
    allocated = {name: node for name, node in state.allocated.items() if name in held}
    evicted_at = None
    if state.allocated and not held:
        # The run ended: by an eviction, its end re-arms the preemption delay.
        ended_by = ended_by_reason(
            change.reason,
            deleted=False,
            awaiting_release=state.awaiting_release,
            attributed=change.eviction is not None,
        )
        if ended_by in EVICTIONS:
            evicted_at = change.at
    return _with(
        state,
        allocated=allocated or _NO_NODES,
        run=run,
        awaiting_release=awaiting,
        evicted_at=evicted_at,
    )


def _abandon(state: PodGroupState, change: Abandonment) -> PodGroupState:
    if state.requeue_not_before != change.not_before:
        return state  # a later decision's cooldown (and its release) stands
    annotations = {
        key: value
        for key, value in state.annotations.items()
        if key != REQUEUE_NOT_BEFORE_ANNOTATION
    }
    return _with(state, annotations=annotations, awaiting_release=False)


def _annotate(state: PodGroupState, change: Annotation) -> PodGroupState:
    annotations = dict(state.annotations)
    for key, value in change.changes.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    if refused_checkpoint(change.changes, state.annotations, change.at, state.start_time):
        annotations = kept_checkpoint(annotations, state.annotations)
    eviction: datetime | _Keep | None = _KEEP
    if LAST_EVICTION_ANNOTATION in change.changes:
        eviction = last_eviction_annotation(
            change.changes[LAST_EVICTION_ANNOTATION], change.at, state.submitted_at
        )
    return _with(state, annotations=annotations, eviction_annotated_at=eviction)


def ignored_values(state: PodGroupState, change: PodGroupChange) -> frozenset[IgnoredValue]:
    """The values ``change`` carries that the fold of it into ``state`` ignores, each counted
    once per event (``IgnoredValue`` says when each kind is ignored)."""
    if isinstance(change, Submission):
        delays: list[str | None] = [change.preemption_delay]
        delays += [text for _, text in change.pod_preemption_delays]
        annotations: Mapping[str, str | None] = change.annotations
        at: datetime | None = change.at
        existed: datetime | None = change.at if state.submitted_at is None else state.submitted_at
    elif isinstance(change, Annotation):
        delays, annotations, at, existed = [], change.changes, change.at, state.submitted_at
    else:
        return frozenset()
    delays.append(annotations.get(PREEMPTION_DELAY_ANNOTATION))
    ignored = set()
    if any(text is not None and valid_delay(text) is None for text in delays):
        ignored.add(IgnoredValue.PREEMPTION_DELAY)
    eviction = annotations.get(LAST_EVICTION_ANNOTATION)
    if eviction is not None and last_eviction_annotation(eviction, at, existed) is None:
        ignored.add(IgnoredValue.LAST_EVICTION_TIMESTAMP)
    cap = annotations.get(MAX_REQUEUES_ANNOTATION)
    if cap is not None:
        try:
            parse_max_requeues(cap, MAX_REQUEUES_ANNOTATION)
        except MinRuntimeError:
            ignored.add(IgnoredValue.MAX_REQUEUES)
    if read_checkpoint_grace(annotations).problem is not None:
        ignored.add(IgnoredValue.CHECKPOINT_GRACE)
    if refused_checkpoint(annotations, state.annotations, at, state.start_time):
        ignored.add(IgnoredValue.CHECKPOINTED_AT)
    owner = annotations.get(TOP_OWNER_ANNOTATION)
    held = None if state.spec is None else state.spec.owner
    carried = change.owner if isinstance(change, Submission) else held
    if (
        owner is not None
        and carried is None
        and read_top_owner({TOP_OWNER_ANNOTATION: owner}).problem is not None
    ):
        ignored.add(IgnoredValue.TOP_OWNER_METADATA)
    return frozenset(ignored)
