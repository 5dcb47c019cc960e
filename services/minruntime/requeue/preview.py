"""What the next requeue cycle would decide, writing nothing: the data of `requeue plan`.

``preview`` runs ``plan_cycle`` — the worker's own reading and planning, the first half of
``run_cycle`` — in the caller's transaction (the command makes it READ ONLY) and adds what the
write half would do with each decision without doing it: whether it would be recorded or is a
repeat of the newest recorded one. It takes no lock: no ``FOR UPDATE``, no advisory lock.

One node pool: node pools are planned independently (a victim's freed capacity goes only to
contenders of its own pool), so the whole cycle is planned, exactly as the worker plans it, and
only the decisions about podgroups of that pool are kept — they are the ones the worker would
make for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Final, NamedTuple

from minruntime.core import DEFAULT_NODE_POOL, Exclusion, RequeueDecision, SkipReason
from minruntime.errors import UserError
from minruntime.requeue.cycle import PlannedCycle, plan_cycle, repeated_decisions
from minruntime.store.unit import ReadUnit

# An error names at most this many known pools, so it stays one line.
_POOLS_IN_ERROR: Final = 8


class UnknownNodePoolError(UserError):
    """``--node-pool`` names a pool the state does not know."""


class RequeuePreview(NamedTuple):
    """What one requeue cycle at ``now`` would nominate and decide (of one pool, or all)."""

    now: datetime
    # None: every node pool.
    node_pool: str | None
    # Every node pool the state names (nodes, podgroups, configurations, excluded pools).
    node_pools: tuple[str, ...]
    # The built-in nominator: nominated uids with how far past their expected runtime they
    # are, and the skip reasons of the running podgroups it did not nominate.
    overruns: Mapping[str, timedelta]
    skipped: Mapping[str, SkipReason]
    # uid -> its nominators (built-in and external), the planner's input.
    candidates: Mapping[str, frozenset[str]]
    # The planner's decisions, in the order the worker makes them.
    decisions: tuple[RequeueDecision, ...]
    # Decisions the worker would not record again (a repeat of the newest recorded one).
    repeated: frozenset[str]
    # What the cycle leaves out (all pools: an excluded node's pool is not known).
    excluded: tuple[Exclusion, ...]
    # Node -> GPUs promised after the cycle (the pool's nodes only, when one is named).
    promised: Mapping[str, float]

    def recorded(self, decision: RequeueDecision) -> bool:
        """Whether the worker would record ``decision`` (commits always are)."""
        return decision.uid not in self.repeated


def preview(unit: ReadUnit, *, now: datetime, node_pool: str | None = None) -> RequeuePreview:
    """Plan a requeue cycle at ``now`` on the unit's state as the worker would; write nothing.

    UnknownNodePoolError when ``node_pool`` is named by nothing in the state.
    """
    planned = plan_cycle(unit, now=now)
    pools = node_pools(planned)
    if node_pool is not None and node_pool not in pools:
        shown = ", ".join(pools[:_POOLS_IN_ERROR])
        if len(pools) > _POOLS_IN_ERROR:
            shown += f" and {len(pools) - _POOLS_IN_ERROR} more"
        raise UnknownNodePoolError(
            f"--node-pool {node_pool[:100]!r}: no node, podgroup or configuration of that node "
            f"pool in the state read; known: {shown}"
        )
    keep = _in_pool(planned, node_pool)
    nominations = planned.nominations
    decisions = tuple(d for d in planned.plan.decisions if keep(d.uid))
    node_in_pool = {
        node.name
        for node in planned.inputs.cluster.nodes
        if node_pool is None or node.node_pool == node_pool
    }
    return RequeuePreview(
        now=now,
        node_pool=node_pool,
        node_pools=pools,
        overruns={uid: o for uid, o in nominations.overruns.items() if keep(uid)},
        skipped={uid: r for uid, r in nominations.skipped.items() if keep(uid)},
        candidates={uid: n for uid, n in planned.candidates.items() if keep(uid)},
        decisions=decisions,
        repeated=repeated_decisions(unit, planned) & {d.uid for d in decisions},
        excluded=planned.excluded,
        promised={n: gpu for n, gpu in planned.plan.promised.items() if n in node_in_pool},
    )


def node_pools(planned: PlannedCycle) -> tuple[str, ...]:
    """Every node pool the cycle's state names, sorted; ``default`` always exists."""
    cluster = planned.inputs.cluster
    return tuple(
        sorted(
            {
                DEFAULT_NODE_POOL,
                *(node.node_pool for node in cluster.nodes),
                *(pg.node_pool for pg in cluster.running),
                *(pg.node_pool for pg in cluster.pending),
                *planned.inputs.configs.by_pool,
                *(e.name for e in planned.excluded if e.what == "node_pool"),
            }
        )
    )


def _in_pool(planned: PlannedCycle, node_pool: str | None) -> Callable[[str], bool]:
    if node_pool is None:
        return lambda uid: True
    cluster = planned.inputs.cluster
    pools = {pg.uid: pg.node_pool for pg in cluster.running}
    pools.update((pg.uid, pg.node_pool) for pg in cluster.pending)
    # A nominated uid the state does not hold as running or pending has no pool: left out.
    return lambda uid: pools.get(uid) == node_pool
