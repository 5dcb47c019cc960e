"""What ``minruntime explain`` shows, as data, and how it is built from the core: pure, no I/O.

``minruntime.audit.explain`` reads a shadow and hands the pieces here: the core's
``ResolutionTrace`` (the narrative: paths, LCA, the upward walk), the SQL's protection row (the
verdict numbers), the podgroup's pods. ``disagreements_of`` compares what the two sides say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from minruntime.audit.disruption import DisruptionFacts
from minruntime.audit.protection import ProtectionRow
from minruntime.audit.requeue_cap import RequeueCapFacts
from minruntime.core import (
    DelayWindow,
    MinRuntimeConfig,
    PodGroupPods,
    Preemptibility,
    QueueTree,
    ResolutionKind,
    ResolutionTrace,
    Resolver,
    evictable_pods,
    format_duration,
    format_rfc3339,
    is_elastic,
    is_protected,
    protected_until,
)
from minruntime.core.checkpoint import (
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
    read_checkpoint_grace,
    read_checkpoint_time,
)

PREEMPT_FIELD: Final = "preemptMinRuntime"
RECLAIM_FIELD: Final = "reclaimMinRuntime"
NO_QUEUE: Final = "the podgroup has no queue: the node pool's default applies"


@dataclass(frozen=True, slots=True)
class PodGroupFacts:
    """The podgroup as the read surface shows it."""

    uid: str
    name: str | None
    namespace: str | None
    # None: never submitted (known only from allocations).
    queue: str | None
    node_pool: str
    status: str
    preemptible: bool
    start_time: datetime | None
    last_start_time: datetime | None
    ended_at: datetime | None
    running_pods: int
    # preemptible | non-preemptible | semi-preemptible (a semi-preemptible core never goes).
    preemptibility: str = Preemptibility.PREEMPTIBLE.value


@dataclass(frozen=True, slots=True)
class WalkStep:
    """One queue of the upward walk: its own value of the field (None: unset)."""

    queue: str
    value: timedelta | None
    applies: bool


@dataclass(frozen=True, slots=True)
class RulePath:
    """Which rule applies and how the minimum runtime was found."""

    rule: str
    # The preemptor's (or reclaimer's) queue: the victim's own queue for the preempt rule.
    preemptor_queue: str | None
    field: str
    reclaim_resolve_method: str
    # The node pool whose configuration is in force (None: the built-in defaults).
    config_node_pool: str | None
    victim_path: tuple[str, ...] | None
    reclaimer_path: tuple[str, ...] | None
    # For reclaim-lca over one root: the lowest common ancestor.
    lca: str | None
    # Where the upward walk begins (None: a queue is unknown, there is no walk).
    walk_start: str | None
    walk: tuple[WalkStep, ...]
    # The verdict numbers (from SQL): the queue whose value applied (None: the default).
    resolved_from: str | None
    min_runtime: timedelta
    # The node pool's default for the field (what applies when no queue sets it).
    default_min_runtime: timedelta
    reason: str


@dataclass(frozen=True, slots=True)
class SubgroupAllowance:
    """How many pods of one subgroup may be evicted now (SEMANTICS.md §6)."""

    name: str
    min_available: int
    pods: int
    running: int
    evictable: int
    # Semi-preemptible: its running pods of the core, never evictable (0 otherwise).
    core: int = 0


@dataclass(frozen=True, slots=True)
class Elasticity:
    """The elastic allowance: per subgroup and in total (total = the SQL evictable_pods)."""

    is_elastic: bool
    subgroups: tuple[SubgroupAllowance, ...]
    evictable_pods: int
    semi_preemptible: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """Protected or not at ``at``; until when (protected) or since when (window over)."""

    protected: bool
    start_time: datetime | None
    protected_until: datetime | None
    # How much longer it stays protected (zero when it is not).
    remaining: timedelta


@dataclass(frozen=True, slots=True)
class PreemptionDelayFacts:
    """A podgroup's preemption delay (SEMANTICS.md §10): while ``inside``, it may not be a
    requeue beneficiary (it may still be allocated as usual)."""

    delay: timedelta
    # spec.preemptionDelay, the annotation, or a pod's annotation (which pod).
    source: str
    window_start: datetime
    # What started the window: "submission", "eviction (the service's own release)" or
    # "eviction (annotation kai.scheduler/last-eviction-timestamp)".
    started_by: str
    ends_at: datetime
    inside: bool
    remaining: timedelta


def delay_facts(window: DelayWindow, at: datetime) -> PreemptionDelayFacts:
    """The facts of a preemption-delay window at ``at``."""
    since = window.last_eviction
    if since is None:
        started_by = "submission"
    elif since.source == "service":
        started_by = "eviction (the service's own release)"
    else:
        started_by = "eviction (annotation kai.scheduler/last-eviction-timestamp)"
    inside = window.inside(at)
    return PreemptionDelayFacts(
        delay=window.delay.delay,
        source=window.delay.describe(),
        window_start=window.start,
        started_by=started_by,
        ends_at=window.ends_at,
        inside=inside,
        remaining=window.ends_at - at if inside else timedelta(0),
    )


@dataclass(frozen=True, slots=True)
class LastEviction:
    """The podgroup's last run an eviction ended, when the scheduler said who evicted it: the
    action, the evicting podgroup and its queue, and the verdict under the one rule that
    applied (docs/audit.md, violations)."""

    run_start: datetime
    run_end: datetime
    ended_by: str
    # event | annotation | condition: which of the scheduler's traces said it.
    source: str
    action: str | None
    evictor: str | None
    evictor_queue: str | None
    evicted_at: datetime | None
    # violated | honoured | unguarded; None: the attribution names no rule, and ``protection``
    # (definite | possible | none, against every possible preemptor) stands.
    exact_verdict: str | None
    protection: str
    applied_min_runtime: timedelta | None
    applied_cut_short: timedelta | None


@dataclass(frozen=True, slots=True)
class Explanation:
    """Everything ``minruntime explain`` shows, as data (``--json`` prints ``describe`` of it)."""

    at: datetime
    podgroup: PodGroupFacts
    # None when the podgroup is not running: there is nothing to protect.
    rule: RulePath | None
    elastic: Elasticity | None
    verdict: Verdict
    notes: tuple[str, ...] = ()
    # Where the rule engine and the SQL read surface differ: always empty unless a bug.
    disagreements: tuple[str, ...] = ()
    # A podgroup that is not running: its preemption delay, if it has one.
    preemption_delay: PreemptionDelayFacts | None = None
    # The requeue cap in force (SEMANTICS.md §10); None for a podgroup never submitted.
    requeue_cap: RequeueCapFacts | None = None
    # The disruption budget and gap in force for its queue (None: none on, or never
    # submitted), and whether one more eviction would be skipped now and until when.
    disruption: DisruptionFacts | None = None
    # Its last run an eviction ended, when the scheduler attributed it; None otherwise.
    last_eviction: LastEviction | None = None
    # Its newest requeue decision was rolled back for beneficiary_over_quota: the rule and
    # the queues' shares that decided it (the decision event's quotaShares, camelCase).
    requeue_shares: dict[str, Any] | None = None
    # Its newest requeue decision was abandoned by the evictor (requeue.abandoned): when,
    # why (pdb, forbidden, not_found, api_error, expired) and the cooldown it cleared.
    requeue_abandoned: AbandonedRequeue | None = None
    # Its newest checkpoint handshake (the evictor's, before a requeue's eviction): waiting
    # (outcome None) or how it ended; None: never asked for a checkpoint.
    checkpoint: CheckpointHandshake | None = None


@dataclass(frozen=True, slots=True)
class CheckpointHandshake:
    """The evictor asked the podgroup for a checkpoint at ``requested_at`` (see
    docs/kubernetes.md, "The checkpoint handshake"); ``outcome`` None: still waiting."""

    requested_at: datetime
    grace: timedelta | None
    outcome: str | None = None
    ended_at: datetime | None = None
    checkpointed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AbandonedRequeue:
    """A committed requeue the cluster side gave up at its deadline."""

    at: datetime
    reason: str
    cleared_not_before: datetime | None


def handshake_facts(
    annotations: Mapping[str, str | None], ended: Any | None, at: datetime
) -> CheckpointHandshake | None:
    """The handshake to show at ``at``: ``ended`` is the newest stored row requested up to
    ``at`` (outcome, requested_at, grace, ended_at, checkpointed_at) or None. The newest one
    ended (``requeue.checkpoint``, stored in ``checkpoint_handshakes``) or, when the PodGroup
    carries a newer ``checkpoint-requested-at`` than any ended one, the one still waiting."""
    pending = read_checkpoint_time(annotations.get(CHECKPOINT_REQUESTED_AT_ANNOTATION), None, at)
    if ended is not None and (pending is None or ended.requested_at >= pending):
        grace: timedelta = ended.grace
        if ended.ended_at > at:  # as of an instant inside the wait
            return CheckpointHandshake(ended.requested_at, grace)
        return CheckpointHandshake(
            ended.requested_at, grace, ended.outcome, ended.ended_at, ended.checkpointed_at
        )
    if pending is None:
        return None
    return CheckpointHandshake(pending, read_checkpoint_grace(annotations).grace)


def handshake_text(handshake: CheckpointHandshake) -> str:
    """One line for `explain`: waiting since the request, or how and when the wait ended."""
    asked = format_rfc3339(handshake.requested_at)
    grace = format_duration(handshake.grace) if handshake.grace is not None else None
    if handshake.outcome is None or handshake.ended_at is None:
        until = ""
        if handshake.grace is not None:
            latest = format_rfc3339(handshake.requested_at + handshake.grace)
            until = f" (grace {grace}: evicted by {latest} at the latest)"
        return f"waiting since {asked} for the workload's checkpointed-at{until}"
    waited = (handshake.ended_at - handshake.requested_at).total_seconds()
    if handshake.outcome == "acknowledged":
        saved = handshake.checkpointed_at
        at = f" (checkpointed at {format_rfc3339(saved)})" if saved is not None else ""
        return f"acknowledged after {waited:.1f} s{at}; requested at {asked}, then evicted"
    if handshake.outcome == "timed_out":
        return f"timed out after the grace ({grace}); requested at {asked}, then evicted"
    return f"the PodGroup was deleted during the wait ({waited:.1f} s after the request at {asked})"


def describe(explanation: Explanation) -> dict[str, Any]:
    """The explanation as plain data (datetimes and timedeltas left for the JSON encoder)."""
    return asdict(explanation)


# -- the narrative, from the core ------------------------------------------------------------


def trace_for(
    resolver: Resolver, victim_queue: str | None, reclaimer: str | None
) -> ResolutionTrace:
    """The core's trace: the preempt rule without a reclaimer, the reclaim rule with one."""
    # "" is never a queue (queue names are non-empty): a queue-less podgroup resolves as an
    # unknown queue, which is what the SQL does with its NULL queue.
    victim = victim_queue or ""
    if reclaimer is None:
        return resolver.trace_preempt(victim)
    return resolver.trace_reclaim(reclaimer, victim)


def rule_path(
    trace: ResolutionTrace,
    row: ProtectionRow,
    config: MinRuntimeConfig,
    config_pool: str | None,
    facts: PodGroupFacts,
    reclaimer: str | None,
    tree: QueueTree,
) -> RulePath:
    """The rule and its path from the core's trace, with the SQL's numbers (``row``)."""
    preempt = trace.kind == ResolutionKind.PREEMPT
    field = PREEMPT_FIELD if preempt else RECLAIM_FIELD
    source = trace.resolution.source
    walk = tuple(
        WalkStep(name, _own_value(tree, name, preempt), applies=name == source)
        for name in trace.walked
    )
    return RulePath(
        rule=str(trace.kind),
        preemptor_queue=facts.queue if reclaimer is None else reclaimer,
        field=field,
        reclaim_resolve_method=str(config.reclaim_resolve_method),
        config_node_pool=config_pool,
        victim_path=trace.victim_path,
        reclaimer_path=trace.reclaimer_path,
        lca=trace.lca,
        walk_start=trace.walked[0] if trace.walked else None,
        walk=walk,
        resolved_from=row.resolved_from,
        min_runtime=row.min_runtime,
        default_min_runtime=config.default_preempt_min_runtime
        if preempt
        else config.default_reclaim_min_runtime,
        reason=trace.reason if facts.queue is not None else NO_QUEUE,
    )


def _own_value(tree: QueueTree, name: str, preempt: bool) -> timedelta | None:
    queue = tree.get(name)
    assert queue is not None  # the walk only visits queues of the tree
    return queue.preempt_min_runtime if preempt else queue.reclaim_min_runtime


def allowance(
    podgroup: PodGroupPods,
    protected: bool,
    preemptibility: Preemptibility = Preemptibility.PREEMPTIBLE,
) -> Elasticity:
    """How many pods may be evicted now, per subgroup and in total (SEMANTICS.md §6, §10)."""
    elastic = is_elastic(podgroup)
    semi = preemptibility is Preemptibility.SEMI_PREEMPTIBLE
    subgroups = []
    for subgroup in podgroup.subgroups:
        running = podgroup.running_count(subgroup.name)
        core = min(running, subgroup.min_available) if semi else 0
        if semi:
            # The core never goes, protected or not; the pods above it follow §6.
            evictable = running - core
        elif not protected:
            evictable = running
        elif elastic:
            evictable = max(0, running - subgroup.min_available)
        else:
            evictable = 0
        subgroups.append(
            SubgroupAllowance(
                subgroup.name,
                subgroup.min_available,
                podgroup.pod_count(subgroup.name),
                running,
                evictable,
                core,
            )
        )
    # The total is the core's own figure; the per-subgroup split adds up to it.
    return Elasticity(
        elastic, tuple(subgroups), evictable_pods(podgroup, protected, preemptibility), semi
    )


def notes_for(facts: PodGroupFacts, trace: ResolutionTrace) -> tuple[str, ...]:
    """What a reader must know: a queue that is unknown, so that the default applied."""
    notes = []
    if facts.queue is None:
        notes.append(
            "the podgroup was never submitted (only its allocations were seen): its queue is "
            "unknown, so the node pool's default applies"
        )
    elif trace.victim_path is None:
        notes.append(_not_in_tree("the podgroup's", facts.queue, facts.node_pool))
    if trace.reclaimer_queue is not None and trace.reclaimer_path is None:
        notes.append(_not_in_tree("the reclaimer's", trace.reclaimer_queue, facts.node_pool))
    return tuple(notes)


def _not_in_tree(whose: str, queue: str, node_pool: str) -> str:
    return (
        f"{whose} queue {queue!r} is not in the queue tree of node pool {node_pool!r} "
        "(unknown, or another pool's): as in KAI, the node pool's default applies"
    )


def not_running_note(facts: PodGroupFacts) -> str:
    """Why a podgroup that is not running has nothing to protect."""
    if facts.status == "pending":
        return "it has never run (no start time): there is nothing to protect yet"
    if facts.status == "deleted":
        return "it was deleted: there is nothing to protect"
    ended = f" at {format_rfc3339(facts.ended_at)}" if facts.ended_at is not None else ""
    return f"its last run ended{ended} (no allocated pods): there is nothing to protect"


# -- the comparison --------------------------------------------------------------------------


def disagreements_of(
    *,
    trace: ResolutionTrace,
    row: ProtectionRow,
    sql_rule: str | None,
    sql_protected: bool,
    elastic: Elasticity,
    sql_elastic: bool,
    at: datetime,
    paths: list[tuple[str, tuple[str, ...] | None]],
) -> tuple[str, ...]:
    """Every number on which the SQL read surface and the rule engine differ (none: agreed)."""
    core = trace.resolution
    core_until = protected_until(row.start_time, core.min_runtime)
    core_protected = is_protected(row.start_time, core.min_runtime, at)
    checks: list[tuple[str, Any, Any]] = [
        ("min_runtime", row.min_runtime, core.min_runtime),
        ("resolved_from", row.resolved_from, core.source),
        ("protected_until", row.protected_until, core_until),
        ("is_protected", sql_protected, core_protected),
        ("is_protected (protection table)", row.is_protected, core_protected),
        ("evictable_pods", row.evictable_pods, elastic.evictable_pods),
        ("is_elastic", sql_elastic, elastic.is_elastic),
    ]
    if sql_rule is not None:
        checks.append(("rule", sql_rule, str(trace.kind)))
    found = [
        f"{what}: SQL says {sql!r}, the rule engine says {engine!r}"
        for what, sql, engine in checks
        if sql != engine
    ]
    found += [
        f"path of {name!r}: the stored path differs from the tree's {path!r}"
        for name, path in paths
    ]
    return tuple(found)
