"""The difference logic of a policy simulation on hand-built timelines (core.simulation)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import EndedRun, MinRuntimeConfig, Queue
from minruntime.core.policy_worlds import PolicyChange, Worlds
from minruntime.core.queue_tree import QueueTree
from minruntime.core.simulation import (
    CONFIDENCE,
    Beneficiary,
    Confidence,
    RecordedDecision,
    Simulation,
    SimulationResult,
)

T0 = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)
M = timedelta(minutes=1)
UNTIL = T0 + 10 * H


def q(name: str, preempt: timedelta | None, reclaim: timedelta | None) -> Queue:
    return Queue(name=name, preempt_min_runtime=preempt, reclaim_min_runtime=reclaim)


def worlds(
    *changed: Queue | tuple[str, None], pools: dict[str, MinRuntimeConfig] | None = None
) -> Worlds:
    pinned: dict[str, Queue | None] = {}
    for item in changed:
        if isinstance(item, Queue):
            pinned[item.name] = item
        else:
            pinned[item[0]] = None
    made = Worlds(PolicyChange(pinned, pools or {}))
    # The recorded tree: two roots, "train" protecting 4h against everyone, "infer" 10m.
    made.queue_upserted(q("train", 4 * H, 4 * H))
    made.queue_upserted(q("infer", 10 * M, None))
    # A pool default that protects against unknown reclaimers as long as train does.
    made.config_updated("default", MinRuntimeConfig(default_reclaim_min_runtime=4 * H))
    return made


def simulation(made: Worlds, since: datetime = T0, until: datetime = UNTIL) -> Simulation:
    return Simulation(made, since, until)


def run(
    uid: str, queue: str, ran: timedelta, ended_by: str = "preempted", gpus: int = 1
) -> EndedRun:
    return EndedRun(uid, queue, "default", "preemptible", T0, T0 + ran, ended_by, Decimal(gpus))


def commit(
    uid: str,
    queue: str,
    at: timedelta,
    *beneficiaries: tuple[str, str],
    gpus: int = 2,
    started: datetime | None = None,
) -> RecordedDecision:
    return RecordedDecision(
        uid,
        "committed",
        None,
        T0 + at,
        T0,
        queue,
        "default",
        Decimal(gpus),
        tuple(Beneficiary(b, q, started) for b, q in beneficiaries),
    )


def uncommitted(
    uid: str, queue: str, at: timedelta, reason: str, outcome: str = "rolled_back"
) -> RecordedDecision:
    return RecordedDecision(uid, outcome, reason, T0 + at, T0, queue, "default", Decimal(1))


def figures(result: SimulationResult, queue: str) -> dict[str, float]:
    return vars(result.queues[queue])


# -- violations ------------------------------------------------------------------------------


def test_a_shorter_window_avoids_a_definite_violation() -> None:
    sim = simulation(
        worlds(
            q("train", H, H),
            pools={"default": MinRuntimeConfig(default_reclaim_min_runtime=H)},
        )
    )
    sim.run_ended(run("a", "train", 2 * H))

    train = sim.result().queues["train"]

    assert (train.violations_before_definite, train.violations_after_definite) == (1, 0)
    assert (train.avoided_definite, train.avoided_possible) == (1, 0)
    assert (train.new_definite, train.new_possible) == (0, 0)
    assert (train.gpu_seconds_lost_before, train.gpu_seconds_lost_after) == (7200.0, 0.0)


def test_a_longer_window_makes_a_new_possible_violation() -> None:
    # infer as recorded: 10m preempt, 4h against other queues (the pool's default): at 5h
    # nothing protected it; a 6h preempt window would have.
    sim = simulation(worlds(q("infer", 6 * H, None)))
    sim.run_ended(run("b", "infer", 5 * H))

    infer = sim.result().queues["infer"]

    assert infer.violations_before_definite + infer.violations_before_possible == 0
    assert infer.new_possible == 1
    assert infer.gpu_seconds_lost_after == 5 * 3600.0


def test_completions_are_never_violations_but_count_for_protection() -> None:
    sim = simulation(worlds(q("train", H, H)))
    sim.run_ended(run("c", "train", 2 * H, ended_by="completed"))

    train = sim.result().queues["train"]

    assert train.evicted_runs == 0
    assert (train.runs, train.runs_protected_shorter) == (1, 1)


def test_runs_outside_the_window_are_not_judged() -> None:
    sim = simulation(worlds(q("train", H, H)), since=T0 + 3 * H)
    sim.run_ended(run("a", "train", 2 * H))

    assert sim.result().queues == {}


# -- protection time ----------------------------------------------------------------------------


def test_protection_time_is_clipped_to_the_window_and_weighed_by_gpus() -> None:
    # train: 4h as recorded (full: every rule 4h), 1h under the change; the window starts at
    # 30m, so 3h30 and 30m of protection count, on 2 GPUs.
    sim = simulation(
        worlds(
            q("train", H, H),
            pools={"default": MinRuntimeConfig(default_reclaim_min_runtime=H)},
        ),
        since=T0 + 30 * M,
    )
    sim.run_ended(run("a", "train", 5 * H, ended_by="completed", gpus=2))

    train = sim.result().queues["train"]

    assert train.fully_protected_gpu_seconds_before == 2 * 3.5 * 3600
    assert train.fully_protected_gpu_seconds_after == 2 * 0.5 * 3600
    assert train.protected_gpu_seconds_before == 2 * 3.5 * 3600
    assert train.runs_protected_shorter == 1


def test_a_run_still_going_counts_up_to_the_window_end() -> None:
    sim = simulation(worlds(q("infer", 2 * H, None)), until=T0 + 90 * M)

    result = sim.result([("infer", "default", T0, Decimal(1))])

    infer = result.queues["infer"]
    assert (infer.runs, infer.runs_protected_longer) == (1, 1)
    # The shortest window: 10m as recorded, 2h under the change, cut at 90m.
    assert infer.fully_protected_gpu_seconds_before == 600
    assert infer.fully_protected_gpu_seconds_after == 90 * 60


# -- decisions --------------------------------------------------------------------------------


def test_a_commit_protected_against_every_beneficiary_rolls_back_exactly() -> None:
    sim = simulation(worlds(q("infer", 2 * H, None)))
    sim.decision(commit("e", "infer", 30 * M, ("f", "infer"), started=T0 + 90 * M))

    result = sim.result()

    [flip] = result.flips
    assert (flip.before, flip.after, flip.after_reason) == ("committed", "rolled_back", "protected")
    assert flip.confidence is Confidence.EXACT
    infer = result.queues["infer"]
    assert infer.flips_to_rolled_back == 1
    # 2 GPUs for 30 minutes; the beneficiary started an hour after the decision.
    assert infer.requeue_gpu_seconds_saved == 3600
    assert infer.wait_added_seconds == 3600


def test_a_commit_some_beneficiary_could_still_take_does_not_flip() -> None:
    # With a pool default of 0, a beneficiary in train (another root) never meets a window:
    # the worker could still have served it.
    sim = simulation(worlds(q("infer", 2 * H, None), pools={"default": MinRuntimeConfig()}))
    sim.decision(commit("e", "infer", 30 * M, ("f", "infer"), ("t", "train")))

    assert sim.result().flips == []


def test_a_beneficiary_that_never_starts_waits_until_the_window_end() -> None:
    sim = simulation(worlds(q("infer", 2 * H, None)))
    sim.decision(commit("e", "infer", 30 * M, ("f", "infer")))

    result = sim.result()

    assert result.waiting_at_end == 1
    assert result.queues["infer"].wait_added_seconds == (UNTIL - T0 - 30 * M).total_seconds()


def test_a_longer_cooldown_skips_the_second_commit_exactly() -> None:
    pool = MinRuntimeConfig(default_reclaim_min_runtime=4 * H, default_requeue_delay=3 * H)
    sim = simulation(worlds(pools={"default": pool}))
    sim.decision(commit("e", "infer", 30 * M, ("f", "infer")))
    sim.decision(commit("e", "infer", 2 * H, ("g", "infer")))

    [flip] = sim.result().flips

    assert (flip.after, flip.after_reason, flip.confidence) == (
        "skipped",
        "cooldown",
        Confidence.EXACT,
    )
    assert flip.at == T0 + 2 * H


def test_a_cap_skips_the_commit_over_it() -> None:
    pool = MinRuntimeConfig(default_reclaim_min_runtime=4 * H, max_requeues=1)
    sim = simulation(worlds(pools={"default": pool}))
    sim.decision(commit("e", "infer", 30 * M, ("f", "infer")))
    sim.decision(commit("e", "infer", 5 * H, ("g", "infer")))

    [flip] = sim.result().flips

    assert (flip.after, flip.after_reason) == ("skipped", "requeue_limit")


def test_a_rollback_for_protection_would_commit_as_an_estimate() -> None:
    # train 4h everywhere as recorded; under the change 1h everywhere: at 2h nothing protects.
    sim = simulation(
        worlds(
            q("train", H, H),
            pools={"default": MinRuntimeConfig(default_reclaim_min_runtime=H)},
        )
    )
    sim.decision(uncommitted("a", "train", 2 * H, "protected"))

    result = sim.result()

    [flip] = result.flips
    assert (flip.before, flip.after, flip.confidence) == (
        "rolled_back",
        "committed",
        Confidence.ESTIMATE,
    )
    assert result.queues["train"].flips_to_committed == 1
    assert result.queues["train"].requeue_gpu_seconds_added == 2 * 3600


def test_a_cooldown_skip_would_commit_under_a_shorter_delay() -> None:
    pool = MinRuntimeConfig(default_reclaim_min_runtime=4 * H, default_requeue_delay=10 * M)
    sim = simulation(worlds(pools={"default": pool}))
    sim.decision(commit("e", "infer", 30 * M, ("f", "infer")))
    sim.decision(uncommitted("e", "infer", H, "cooldown", outcome="skipped"))

    [flip] = sim.result().flips

    assert (flip.before, flip.after, flip.confidence) == (
        "skipped",
        "committed",
        Confidence.ESTIMATE,
    )


def test_other_reasons_never_flip() -> None:
    sim = simulation(worlds(q("train", timedelta(0), timedelta(0))))
    sim.decision(uncommitted("a", "train", 2 * H, "no_contender_fits"))

    assert sim.result().flips == []


# -- confidence and no-op ----------------------------------------------------------------------


def test_each_figure_group_names_its_confidence() -> None:
    exact = {group for group, (kind, _) in CONFIDENCE.items() if kind is Confidence.EXACT}
    estimate = {group for group, (kind, _) in CONFIDENCE.items() if kind is Confidence.ESTIMATE}

    assert exact == {"violations", "gpu_hours_lost", "flips_from_committed", "protection"}
    assert estimate == {"flips_to_committed", "requeue_gpu_hours", "wait"}


@given(
    preempt=st.integers(min_value=0, max_value=600),
    reclaim=st.integers(min_value=0, max_value=600),
    ran=st.lists(st.integers(min_value=1, max_value=600), min_size=1, max_size=6),
    decided=st.lists(st.integers(min_value=1, max_value=600), max_size=4),
)
def test_a_change_equal_to_the_log_changes_nothing(
    preempt: int, reclaim: int, ran: list[int], decided: list[int]
) -> None:
    queue = q("train", preempt * M, reclaim * M)
    made = Worlds(PolicyChange({"train": queue}))
    made.queue_upserted(queue)
    sim = Simulation(made, T0, T0 + 11 * H)
    for number, minutes in enumerate(ran):
        sim.run_ended(run(f"r{number}", "train", minutes * M))
    for number, minutes in enumerate(decided):
        sim.decision(commit(f"d{number}", "train", minutes * M, ("x", "train")))

    result = sim.result()

    assert not result.rules_differ
    assert not result.total.differs
    assert result.flips == []


@given(
    minutes=st.integers(min_value=1, max_value=600), window=st.integers(min_value=0, max_value=600)
)
def test_a_violation_is_avoided_iff_the_changed_windows_ended_before_the_eviction(
    minutes: int, window: int
) -> None:
    pool = {"default": MinRuntimeConfig(default_reclaim_min_runtime=window * M)}
    sim = simulation(worlds(q("train", window * M, window * M), pools=pool))
    sim.run_ended(run("a", "train", minutes * M))

    train = sim.result().queues["train"]

    # As recorded 4h everywhere: a violation (definite) iff it ran under 4h.
    assert train.violations_before_definite == (minutes < 240)
    assert train.avoided_definite == (minutes < 240 and minutes >= window)
    assert train.new_definite == (minutes >= 240 and minutes < window)


def test_the_worlds_compare_their_trees_when_asked_not_at_every_queue_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A log opens with its whole queue tree: 200 recorded queues, then one question."""
    compared = 0
    equal = QueueTree.__eq__

    def counted(self: QueueTree, other: object) -> bool:
        nonlocal compared
        compared += 1
        return equal(self, other)

    monkeypatch.setattr(QueueTree, "__eq__", counted)
    worlds = Worlds(PolicyChange({"q7": Queue(name="q7", preempt_min_runtime=timedelta(hours=1))}))
    for number in range(200):
        worlds.queue_upserted(Queue(name=f"q{number}"))
    assert compared == 0
    assert worlds.differ  # q7 is pinned with a window the log's q7 has not
    assert worlds.differ
    assert compared == 1
    worlds.queue_upserted(Queue(name="q7", preempt_min_runtime=timedelta(hours=1)))
    assert not worlds.differ  # the log now has what the change pins
    assert compared == 2
