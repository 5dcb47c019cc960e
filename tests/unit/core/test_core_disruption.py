"""Disruption budgets and pacing (core.disruption): the settings' bounds, the queue override,
the top owner, and the planner's gates, with hypothesis properties."""

from __future__ import annotations

from datetime import timedelta

import pytest
from core_testkit import T0, node, nominated, pending_pg, plan, running_pg
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    ClusterState,
    InvalidConfigError,
    MinRuntimeConfig,
    NodePoolConfigs,
    RequeueOutcome,
    RequeueReason,
)
from minruntime.core.disruption import (
    EVICTION_WINDOW_ANNOTATION,
    MAX_EVICTIONS_ANNOTATION,
    TOP_OWNER_ANNOTATION,
    DisruptionHistory,
    DisruptionLedger,
    DisruptionPolicy,
    TopOwner,
    queue_policy,
    read_top_owner,
)

HOUR = timedelta(hours=1)
OWNER_YAML = "name: train\nuid: js-1\ngroup: jobset.x-k8s.io\nversion: v1alpha2\nkind: JobSet\n"


# --- the settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_evictions_per_window": 0, "eviction_window": HOUR}, "from 1 to 100000"),
        ({"max_evictions_per_window": -1, "eviction_window": HOUR}, "from 1 to 100000"),
        ({"max_evictions_per_window": 10**9, "eviction_window": HOUR}, "from 1 to 100000"),
        ({"max_evictions_per_window": 2, "eviction_window": -HOUR}, "positive and at most 744h"),
        ({"max_evictions_per_window": 2, "eviction_window": 800 * HOUR}, "at most 744h"),
        ({"max_evictions_per_window": 2}, "set both or neither"),
        ({"min_eviction_gap": timedelta(0)}, "minEvictionGap must be positive"),
        ({"min_eviction_gap": timedelta(days=8)}, "at most 168h"),
    ],
)
def test_operator_settings_out_of_bounds_are_one_line_errors(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message) as error:
        MinRuntimeConfig(**fields)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def test_a_queue_overrides_the_pool_budget_and_bad_annotations_are_ignored_with_a_problem() -> None:
    pool = DisruptionPolicy(5, HOUR, timedelta(minutes=5))
    assert queue_policy(pool, {}).policy == pool
    own = queue_policy(pool, {MAX_EVICTIONS_ANNOTATION: "2", EVICTION_WINDOW_ANNOTATION: "10m"})
    assert own.policy == DisruptionPolicy(2, timedelta(minutes=10), timedelta(minutes=5))
    assert own.problems == ()
    for bad in ("0", "-3", "lots", "99999999999"):
        ignored = queue_policy(pool, {MAX_EVICTIONS_ANNOTATION: bad})
        assert ignored.policy == pool
        assert len(ignored.problems) == 1
        assert ignored.problems[0].endswith("ignored")
    ignored = queue_policy(pool, {EVICTION_WINDOW_ANNOTATION: "-5m"})
    assert (ignored.policy, len(ignored.problems)) == (pool, 1)
    # A number without a window where the pool sets none: ignored, the pool (off) applies.
    alone = queue_policy(DisruptionPolicy(), {MAX_EVICTIONS_ANNOTATION: "3"})
    assert alone.policy == DisruptionPolicy()
    assert "need each other" in alone.problems[0]


def test_the_top_owner_is_read_from_kais_yaml_or_json_and_bad_ones_mean_no_owner() -> None:
    owner = TopOwner("JobSet", "train", "js-1")
    assert read_top_owner({TOP_OWNER_ANNOTATION: OWNER_YAML}).owner == owner
    as_json = '{"kind": "JobSet", "name": "train", "uid": "js-1"}'
    assert read_top_owner({TOP_OWNER_ANNOTATION: as_json}).owner == owner
    assert read_top_owner({}).owner is None
    assert read_top_owner({}).problem is None
    for bad in ("{not json", "[1, 2]", "just words", "kind: JobSet\n", "x" * 5000, "  a: b"):
        reading = read_top_owner({TOP_OWNER_ANNOTATION: bad})
        assert reading.owner is None
        assert reading.problem is not None


# --- the ledger ---------------------------------------------------------------------------------


def test_the_budget_frees_when_the_oldest_counted_eviction_leaves_the_window() -> None:
    history = DisruptionHistory(by_queue={"team": (T0 - 50 * MIN, T0 - 10 * MIN)})
    ledger = DisruptionLedger(history)
    policy = DisruptionPolicy(2, HOUR)
    refusal = ledger.refusal("team", None, policy, T0)
    assert refusal is not None
    assert (refusal.rule, refusal.frees_at) == ("disruption_budget", T0 + 10 * MIN)
    assert ledger.refusal("team", None, policy, T0 + 10 * MIN) is None
    assert ledger.refusal("other", None, policy, T0) is None


def test_the_gap_counts_from_the_owners_last_eviction() -> None:
    owner = TopOwner("JobSet", "train", "js-1")
    ledger = DisruptionLedger(DisruptionHistory(by_owner={"js-1": (T0 - 2 * MIN,)}))
    policy = DisruptionPolicy(min_eviction_gap=5 * MIN)
    refusal = ledger.refusal("team", owner, policy, T0)
    assert refusal is not None
    assert (refusal.rule, refusal.frees_at) == ("eviction_gap", T0 + 3 * MIN)
    assert ledger.refusal("team", TopOwner("JobSet", "other", "js-2"), policy, T0) is None
    assert ledger.refusal("team", None, policy, T0) is None


MIN = timedelta(minutes=1)


@given(
    times=st.lists(st.integers(0, 7200), max_size=30),
    limit=st.integers(1, 10),
    window=st.integers(1, 7200),
    at=st.integers(0, 7200),
)
def test_property_a_budget_refuses_exactly_when_the_window_holds_limit_evictions(
    times: list[int], limit: int, window: int, at: int
) -> None:
    moments = tuple(T0 + timedelta(seconds=t) for t in times)
    now = T0 + timedelta(seconds=at)
    width = timedelta(seconds=window)
    ledger = DisruptionLedger(DisruptionHistory(by_queue={"q": moments}))
    refusal = ledger.refusal("q", None, DisruptionPolicy(limit, width), now)
    in_window = [m for m in moments if now - width < m <= now]
    assert (refusal is not None) == (len(in_window) >= limit)
    if refusal is not None:
        assert refusal.frees_at > now
        # At the instant it frees up, the window holds fewer than limit of these evictions.
        later = [m for m in moments if refusal.frees_at - width < m <= refusal.frees_at]
        assert len([m for m in later if m <= now]) < limit


# --- the planner --------------------------------------------------------------------------------


def contention(victims: int, **annotations: str) -> ClusterState:
    """``victims`` over-running podgroups of queue team, one node each; as many pending."""
    ann = {EXPECTED_RUNTIME_ANNOTATION: "1h", **annotations}
    running = tuple(
        running_pg(f"job-{i}", gpus=((f"n{i}", 4.0),), annotations=ann) for i in range(victims)
    )
    pending = tuple(pending_pg(f"urgent-{i}", priority=10) for i in range(victims))
    nodes = tuple(node(f"n{i}", 4.0) for i in range(victims))
    return ClusterState(nodes=nodes, running=running, pending=pending)


def budgeted(**fields: object) -> NodePoolConfigs:
    return NodePoolConfigs({"default": MinRuntimeConfig(**fields)})  # type: ignore[arg-type]


def test_a_queue_budget_skips_the_requeues_beyond_it_with_when_it_frees_up() -> None:
    snapshot = contention(4)
    cycle = plan(
        snapshot,
        nominated(*(f"job-{i}" for i in range(4))),
        configs=budgeted(max_evictions_per_window=2, eviction_window=HOUR),
    )
    outcomes = [(d.outcome, d.reason, d.frees_at) for d in cycle.decisions]
    assert outcomes.count((RequeueOutcome.COMMITTED, None, None)) == 2
    skipped = [o for o in outcomes if o[0] is RequeueOutcome.SKIPPED]
    assert skipped == [(RequeueOutcome.SKIPPED, RequeueReason.DISRUPTION_BUDGET, T0 + HOUR)] * 2
    # Without the budget every one is committed (the gate is what skips them).
    unlimited = plan(snapshot, nominated(*(f"job-{i}" for i in range(4))))
    assert all(d.outcome is RequeueOutcome.COMMITTED for d in unlimited.decisions)


def test_the_budget_counts_past_evictions_and_a_queues_annotation_overrides_the_pool() -> None:
    base = contention(1)
    history = DisruptionHistory(by_queue={"team": (T0 - 30 * MIN,)})
    snapshot = ClusterState(
        nodes=base.nodes, running=base.running, pending=base.pending, disruption_history=history
    )
    configs = budgeted(max_evictions_per_window=1, eviction_window=HOUR)
    [decision] = plan(snapshot, nominated("job-0"), configs=configs).decisions
    assert (decision.reason, decision.frees_at) == (RequeueReason.DISRUPTION_BUDGET, T0 + 30 * MIN)
    roomy = ClusterState(
        nodes=base.nodes,
        running=base.running,
        pending=base.pending,
        disruption_history=history,
        queue_annotations={"team": {MAX_EVICTIONS_ANNOTATION: "5"}},
    )
    [decision] = plan(roomy, nominated("job-0"), configs=configs).decisions
    assert decision.outcome is RequeueOutcome.COMMITTED


def test_a_gap_per_owner_lets_one_gang_of_a_jobset_go_per_gap() -> None:
    snapshot = contention(3, **{TOP_OWNER_ANNOTATION: OWNER_YAML})
    cycle = plan(
        snapshot,
        nominated("job-0", "job-1", "job-2"),
        configs=budgeted(min_eviction_gap=5 * MIN),
    )
    reasons = sorted(str(d.reason) for d in cycle.decisions)
    assert reasons == ["None", "eviction_gap", "eviction_gap"]
    assert {d.frees_at for d in cycle.decisions if d.reason} == {T0 + 5 * MIN}


@given(
    victims=st.integers(1, 6),
    limit=st.integers(1, 6),
    past=st.lists(st.integers(1, 3600), max_size=6),
)
def test_property_commits_never_exceed_the_budget_left_in_the_window(
    victims: int, limit: int, past: list[int]
) -> None:
    base = contention(victims)
    history = DisruptionHistory(by_queue={"team": tuple(T0 - timedelta(seconds=p) for p in past)})
    snapshot = ClusterState(
        nodes=base.nodes, running=base.running, pending=base.pending, disruption_history=history
    )
    cycle = plan(
        snapshot,
        nominated(*(f"job-{i}" for i in range(victims))),
        configs=budgeted(max_evictions_per_window=limit, eviction_window=HOUR),
    )
    committed = sum(d.outcome is RequeueOutcome.COMMITTED for d in cycle.decisions)
    # Strict, like §5: an eviction exactly one window ago no longer counts.
    counted = sum(1 for seconds in past if seconds < 3600)
    assert committed == min(victims, max(0, limit - counted))
    assert all(
        d.reason is RequeueReason.DISRUPTION_BUDGET
        for d in cycle.decisions
        if d.outcome is not RequeueOutcome.COMMITTED
    )


def test_the_budget_round_trips_through_plugin_arguments_and_bad_ones_are_one_line() -> None:
    arguments = {"maxEvictionsPerWindow": "3", "evictionWindow": "2h", "minEvictionGap": "5m"}
    config = MinRuntimeConfig.from_arguments(arguments)
    assert config.disruption == DisruptionPolicy(3, 2 * HOUR, 5 * MIN)
    assert MinRuntimeConfig.from_arguments(config.to_arguments()) == config
    for bad in ({"maxEvictionsPerWindow": "0", "evictionWindow": "1h"}, {"evictionWindow": "1h"}):
        with pytest.raises(InvalidConfigError) as error:
            MinRuntimeConfig.from_arguments(bad)
        assert "\n" not in str(error.value)
