"""Why a podgroup is or is not protected: the rule, the resolution path, the window, the verdict.

The narrative (paths, LCA, the upward walk, the elastic allowance) comes from the pure core
(``Resolver``, ``is_elastic``, ``evictable_pods``) run over the queue tree and node-pool
configuration read from the very shadow the SQL answers from. The verdict numbers come from the
SQL functions (``min_runtime_for``, ``preempt_protection(at)`` / ``reclaim_protection(q, at)``,
``is_protected``). Every explanation compares the two: a difference is a bug, and is reported
in ``Explanation.disagreements`` rather than hidden.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from minruntime.audit.disruption import DisruptionFacts, disruption_facts
from minruntime.audit.explain_model import (
    AbandonedRequeue,
    Elasticity,
    Explanation,
    LastEviction,
    PodGroupFacts,
    PreemptionDelayFacts,
    Verdict,
    allowance,
    delay_facts,
    disagreements_of,
    handshake_facts,
    not_running_note,
    notes_for,
    rule_path,
    trace_for,
)
from minruntime.audit.protection import ProtectionRow, instant
from minruntime.audit.requeue_cap import RequeueCapFacts, requeue_cap_facts
from minruntime.core import (
    DEFAULT_NODE_POOL,
    MAX_REQUEUES,
    MinRuntimeConfig,
    PodGroupPods,
    PodGroupState,
    ResolutionTrace,
    Resolver,
    format_rfc3339,
    remaining_protection,
)
from minruntime.core.disruption import owner_uid, queue_policy
from minruntime.core.podgroup import owner_of
from minruntime.errors import UnknownPodGroupError
from minruntime.store.unit import StateReader


def explain(
    unit: StateReader,
    uid: str,
    at: datetime | None = None,
    preemptor_queue: str | None = None,
) -> Explanation:
    """Explain one podgroup at ``at`` (None: the database's now) in the unit's state."""
    return Explainer(unit, at).explain(uid, preemptor_queue)


class Explainer:
    """Explains podgroups at one instant of one state (tree and configuration read once)."""

    def __init__(self, unit: StateReader, at: datetime | None) -> None:
        self._unit = unit
        self._as_of = at is not None
        self.at = instant(unit, at)
        self._stored = unit.queue_tree()
        self._configs = unit.node_pool_configs()

    def explain(self, uid: str, preemptor_queue: str | None = None) -> Explanation:
        """Why ``uid`` is or is not protected against a preemptor in ``preemptor_queue``.

        ``preemptor_queue`` None or the victim's own queue: the preempt rule; another queue:
        the reclaim rule with the node pool's reclaimResolveMethod. With the requeue cap in
        force for it (SEMANTICS.md §10).
        """
        explanation = self._protection(uid, preemptor_queue)
        shares = self._unit.newest_quota_shares(uid, self.at)
        abandoned = self._unit.newest_abandoned(uid, self.at)
        handshake = self._unit.newest_handshake(uid, self.at)
        return replace(
            explanation,
            checkpoint=handshake_facts(self._annotations(uid), handshake, self.at),
            requeue_abandoned=None if abandoned is None else AbandonedRequeue(*abandoned),
            requeue_cap=self._requeue_cap(explanation.podgroup),
            disruption=self._disruption(explanation.podgroup),
            requeue_shares=shares,
            last_eviction=self._last_eviction(uid),
        )

    def _last_eviction(self, uid: str) -> LastEviction | None:
        """Who evicted its last evicted run, when the scheduler said so (None otherwise)."""
        row = self._unit.last_eviction(uid, self.at)
        if row is None or row.eviction_source is None:
            return None
        fields = row._asdict()
        source, action = fields.pop("eviction_source"), fields.pop("eviction_action")
        return LastEviction(source=source, action=action, **fields)

    def _protection(self, uid: str, preemptor_queue: str | None) -> Explanation:
        facts, stored_elastic = self._podgroup(uid)
        if facts.status != "running":
            return self._not_running(facts, preemptor_queue)
        reclaimer = None if preemptor_queue in (None, facts.queue) else preemptor_queue
        config, config_pool = self._config_for(facts.node_pool)
        # The tree the podgroup's pool sees: its scheduler's queues (KAI's shards).
        tree = self._stored.tree.for_pool(facts.node_pool)
        trace = trace_for(Resolver(tree, config), facts.queue, reclaimer)
        (row,) = self._unit.protection_rows(self.at, reclaimer, uid)
        sql_rule = self._sql_rule(facts, reclaimer)
        protected = self._sql_is_protected(facts, reclaimer, row)
        elastic = self._elasticity(uid, protected)
        rule = rule_path(trace, row, config, config_pool, facts, reclaimer, tree)
        left = timedelta(0)
        if protected:
            left = remaining_protection(row.start_time, row.min_runtime, self.at)
        verdict = Verdict(protected, row.start_time, row.protected_until, left)
        disagreements = disagreements_of(
            trace=trace,
            row=row,
            sql_rule=sql_rule,
            sql_protected=protected,
            elastic=elastic,
            sql_elastic=stored_elastic,
            at=self.at,
            paths=self._path_checks(trace, facts.node_pool),
        )
        return Explanation(
            at=self.at,
            podgroup=facts,
            rule=rule,
            elastic=elastic,
            verdict=verdict,
            notes=notes_for(facts, trace),
            disagreements=disagreements,
        )

    def _requeue_cap(self, facts: PodGroupFacts) -> RequeueCapFacts | None:
        """The cap in force and the committed requeues it counts (None: never submitted)."""
        if facts.queue is None:
            return None
        # The newest MAX_REQUEUES are enough: no cap counts more.
        committed = self._unit.committed_requeues(facts.uid, self.at, MAX_REQUEUES)
        config, config_pool = self._config_for(facts.node_pool)
        annotations = self._annotations(facts.uid)
        return requeue_cap_facts(config, config_pool, annotations, committed, self.at)

    def _disruption(self, facts: PodGroupFacts) -> DisruptionFacts | None:
        """The disruption budget and gap in force for its queue, and whether one more
        eviction would be skipped now (None: never submitted, or no rule on)."""
        if facts.queue is None:
            return None
        config, _ = self._config_for(facts.node_pool)
        queue = self._stored.tree.get(facts.queue)
        annotations = dict(queue.disruption) if queue is not None else {}
        policy = queue_policy(config.disruption, annotations).policy
        spans = [s for s in (policy.eviction_window, policy.min_eviction_gap) if s is not None]
        if not spans and not annotations:
            return None
        found = self._stored_state(facts.uid)
        owner = None if found is None else owner_of(found)
        evictions = []
        if spans:
            since = self.at - max(spans)
            rows = self._unit.disruption_rows(since)
            evictions = [
                (queue_name, owner_uid(stored, annotation), moment)
                for queue_name, stored, annotation, moment in rows
            ]
        return disruption_facts(
            config.disruption, facts.queue, annotations, owner, evictions, self.at
        )

    # -- reading the state -----------------------------------------------------------------

    def _podgroup(self, uid: str) -> tuple[PodGroupFacts, bool]:
        """The podgroup's facts and the read surface's is_elastic."""
        found = self._unit.podgroup_facts(uid)
        if found is None:
            when = f" at {format_rfc3339(self.at)}" if self._as_of else ""
            raise UnknownPodGroupError(f"no podgroup with uid {uid!r}{when}")
        fields = dict(found)
        stored_elastic = bool(fields.pop("is_elastic"))
        return PodGroupFacts(**fields), stored_elastic

    def _annotations(self, uid: str) -> dict[str, str]:
        """The podgroup's stored annotations, as strings (none: not stored)."""
        annotations = self._unit.podgroup_annotations(uid)
        if not isinstance(annotations, dict):
            return {}
        return {str(k): str(v) for k, v in annotations.items()}

    def _config_for(self, node_pool: str) -> tuple[MinRuntimeConfig, str | None]:
        """The configuration in force for the pool, and whose it is (None: the built-ins)."""
        owner = next(
            (pool for pool in (node_pool, DEFAULT_NODE_POOL) if pool in self._configs.by_pool),
            None,
        )
        return self._configs.for_pool(node_pool), owner

    def _sql_rule(self, facts: PodGroupFacts, reclaimer: str | None) -> str | None:
        if facts.queue is None:
            # min_runtime_for needs the victim's queue; a never-submitted podgroup has none.
            return None
        return self._unit.min_runtime_rule(facts.queue, reclaimer or facts.queue, facts.node_pool)

    def _sql_is_protected(
        self, facts: PodGroupFacts, reclaimer: str | None, row: ProtectionRow
    ) -> bool:
        preemptor = reclaimer or facts.queue
        if preemptor is None:
            # is_protected(uid, q) picks the rule by comparing q with the victim's queue; a
            # podgroup without a queue has only the preempt table's answer.
            return row.is_protected
        return self._unit.is_protected(facts.uid, preemptor, self.at)

    def _stored_state(self, uid: str) -> PodGroupState | None:
        """The podgroup's state as the shadow stores it (None: not stored)."""
        return self._unit.podgroup_states([uid]).get(uid)

    def _elasticity(self, uid: str, protected: bool) -> Elasticity:
        state = self._stored_state(uid)
        running = frozenset(state.allocated) if state is not None else frozenset()
        if state is None or state.spec is None or not state.spec.subgroups:
            # Never submitted: the gang's shape is unknown, so it counts as a non-elastic gang
            # (the side that protects), as the projection does.
            return Elasticity(False, (), 0 if protected else len(running))
        podgroup = PodGroupPods(
            uid=uid,
            pods={name: pod.subgroup for name, pod in sorted(state.pods.items())},
            running=running,
            subgroups=tuple(sorted(state.spec.subgroups, key=lambda subgroup: subgroup.name)),
        )
        return allowance(podgroup, protected, state.preemptibility)

    def _path_checks(
        self, trace: ResolutionTrace, node_pool: str
    ) -> list[tuple[str, tuple[str, ...] | None]]:
        return [
            (name, path)
            for name, path in (
                (trace.victim_queue, trace.victim_path),
                (trace.reclaimer_queue, trace.reclaimer_path),
            )
            if name is not None
            and path is not None
            and self._stored.path_in(node_pool, name) != path
        ]

    def _not_running(self, facts: PodGroupFacts, preemptor_queue: str | None) -> Explanation:
        preemptor = preemptor_queue or facts.queue
        disagreements: tuple[str, ...] = ()
        if preemptor is not None and self._unit.is_protected(facts.uid, preemptor, self.at):
            disagreements = (
                f"is_protected: SQL says True for a podgroup that is {facts.status}, "
                "the rule engine says False (no allocated pods, nothing to protect)",
            )
        return Explanation(
            at=self.at,
            podgroup=facts,
            rule=None,
            elastic=None,
            verdict=Verdict(False, facts.start_time, None, timedelta(0)),
            notes=(not_running_note(facts),),
            disagreements=disagreements,
            preemption_delay=self._preemption_delay(facts),
        )

    def _preemption_delay(self, facts: PodGroupFacts) -> PreemptionDelayFacts | None:
        """The delay window of a podgroup that waits for resources, from its stored state."""
        if facts.status == "deleted":
            return None
        state = self._stored_state(facts.uid)
        window = None if state is None else state.delay_window()
        return None if window is None else delay_facts(window, self.at)
