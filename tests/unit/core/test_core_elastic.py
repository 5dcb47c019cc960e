from __future__ import annotations

import pytest

from minruntime.core import (
    InvalidPodGroupError,
    PodGroupPods,
    SubGroup,
    VictimEviction,
    evictable_pods,
    is_elastic,
    passes_victim_filter,
    protected_elasticity,
    validate_scenario,
)


def podgroup(
    uid: str = "pg",
    *,
    min_available: int = 1,
    pods: int = 1,
    running: int | None = None,
) -> PodGroupPods:
    names = [f"{uid}-p{i}" for i in range(pods)]
    return PodGroupPods(
        uid=uid,
        pods=dict.fromkeys(names, "default"),
        running=frozenset(names[: pods if running is None else running]),
        subgroups=(SubGroup("default", min_available),),
    )


def two_subgroups() -> PodGroupPods:
    return PodGroupPods(
        uid="pg2",
        pods={"m0": "master", "w0": "workers", "w1": "workers", "w2": "workers"},
        running=frozenset({"m0", "w0", "w1", "w2"}),
        subgroups=(SubGroup("master", 1), SubGroup("workers", 2)),
    )


def test_elastic_when_min_available_below_pod_count() -> None:
    assert is_elastic(podgroup(min_available=2, pods=4))
    assert not is_elastic(podgroup(min_available=4, pods=4))
    assert not is_elastic(podgroup(min_available=1, pods=1))
    assert is_elastic(podgroup(min_available=0, pods=1))
    # Pods in any state count, running or not.
    assert is_elastic(podgroup(min_available=2, pods=4, running=1))
    assert is_elastic(two_subgroups())


def test_victim_filter() -> None:
    rigid, elastic = podgroup(pods=1), podgroup(min_available=1, pods=3)
    assert not passes_victim_filter(rigid, protected=True)
    assert passes_victim_filter(rigid, protected=False)
    assert passes_victim_filter(elastic, protected=True)


def test_leaving_exactly_min_available_is_fine() -> None:
    victim = podgroup(min_available=2, pods=4)
    verdict = validate_scenario([VictimEviction(victim, True, frozenset({"pg-p0", "pg-p1"}))])
    assert verdict.valid


def test_going_below_min_available_is_invalid_and_names_the_subgroup() -> None:
    victim = podgroup(min_available=2, pods=4)
    evicted = frozenset({"pg-p0", "pg-p1", "pg-p2"})
    verdict = validate_scenario([VictimEviction(victim, True, evicted)])
    assert not verdict.valid
    assert (verdict.podgroup, verdict.subgroup) == ("pg", "default")
    assert verdict.reason is not None
    assert "below minAvailable 2" in verdict.reason


def test_unprotected_elastic_may_lose_everything() -> None:
    victim = podgroup(min_available=2, pods=4)
    assert validate_scenario([VictimEviction.whole(victim, protected=False)]).valid


def test_protected_elastic_cannot_be_requeued_whole_unless_min_available_zero() -> None:
    assert not validate_scenario(
        [VictimEviction.whole(podgroup(min_available=1, pods=3), True)]
    ).valid
    assert validate_scenario([VictimEviction.whole(podgroup(min_available=0, pods=3), True)]).valid


def test_one_invalid_victim_invalidates_the_scenario() -> None:
    fine = VictimEviction(podgroup("ok", min_available=1, pods=3), True, frozenset({"ok-p0"}))
    bad = VictimEviction.whole(podgroup("bad", min_available=1, pods=3), True)
    verdict = validate_scenario([fine, bad])
    assert not verdict.valid
    assert verdict.podgroup == "bad"


def test_only_subgroups_that_lose_pods_are_checked() -> None:
    group = PodGroupPods(
        uid="pg",
        pods={"a0": "a", "b0": "b", "b1": "b"},
        running=frozenset({"b0", "b1"}),  # subgroup a is already below its minAvailable
        subgroups=(SubGroup("a", 1), SubGroup("b", 1)),
    )
    assert validate_scenario([VictimEviction(group, True, frozenset({"b0"}))]).valid


def test_subgroups_are_checked_separately() -> None:
    group = two_subgroups()
    assert validate_scenario([VictimEviction(group, True, frozenset({"w0"}))]).valid
    verdict = validate_scenario([VictimEviction(group, True, frozenset({"m0"}))])
    assert (verdict.valid, verdict.subgroup) == (False, "master")
    verdict = validate_scenario([VictimEviction(group, True, frozenset({"w0", "w1"}))])
    assert (verdict.valid, verdict.subgroup) == (False, "workers")


def test_a_protected_rigid_victim_in_a_scenario_is_refused() -> None:
    verdict = validate_scenario([VictimEviction.whole(podgroup(pods=2, min_available=2), True)])
    assert not verdict.valid
    assert verdict.reason is not None
    assert "not elastic" in verdict.reason


def test_evicting_a_pod_that_is_not_running_is_an_error() -> None:
    victim = podgroup(min_available=1, pods=3, running=2)
    with pytest.raises(InvalidPodGroupError, match="pg-p2"):
        validate_scenario([VictimEviction(victim, False, frozenset({"pg-p2"}))])


def test_evictable_pods() -> None:
    assert evictable_pods(podgroup(min_available=2, pods=5), protected=True) == 3
    assert evictable_pods(podgroup(min_available=2, pods=5), protected=False) == 5
    assert evictable_pods(podgroup(min_available=1, pods=1), protected=True) == 0
    assert evictable_pods(podgroup(min_available=1, pods=1), protected=False) == 1
    assert evictable_pods(podgroup(min_available=3, pods=5, running=2), protected=True) == 0
    assert evictable_pods(two_subgroups(), protected=True) == 1
    assert evictable_pods(podgroup(min_available=0, pods=2), protected=True) == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pods": {"p": "nope"}}, "undeclared subgroup"),
        ({"pods": {"p": "default"}, "running": frozenset({"q"})}, "not its pods"),
        ({"pods": {}, "subgroups": ()}, "at least one subgroup"),
        ({"pods": {}, "subgroups": (SubGroup("a"), SubGroup("a"))}, "duplicate subgroup"),
    ],
)
def test_inconsistent_podgroups_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidPodGroupError, match=message):
        PodGroupPods(uid="pg", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, 1.5, True])
def test_min_available_must_be_a_whole_number(value: object) -> None:
    with pytest.raises(InvalidPodGroupError, match="minAvailable"):
        SubGroup("a", value)  # type: ignore[arg-type]


def test_protected_elasticity_counts_as_is_elastic_and_evictable_pods_do() -> None:
    for group in (podgroup(pods=3, min_available=1, running=2), podgroup(pods=2, min_available=2)):
        pods = group.pods
        counted = protected_elasticity(
            group.subgroups, pods.values(), (pods[name] for name in group.running)
        )
        assert counted == (is_elastic(group), evictable_pods(group, protected=True))
    workers = two_subgroups()
    assert protected_elasticity(
        workers.subgroups, workers.pods.values(), (workers.pods[n] for n in workers.running)
    ) == (True, 1)
