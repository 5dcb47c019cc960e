from __future__ import annotations

from datetime import timedelta

import pytest
from core_testkit import T0, s

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    EXPECTED_RUNTIME_PLUGIN,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    NominationCandidate,
    NominationVerdict,
    Preemptibility,
    SkipReason,
    nominate,
)

NOW = T0 + s(3600)


def candidate(
    *,
    running_pods: int = 2,
    preemptible: bool = True,
    semi: bool = False,
    expected: str | None = "30m",
    start: timedelta | None = timedelta(hours=1),
    not_before: str | None = None,
) -> NominationCandidate:
    annotations = {}
    if expected is not None:
        annotations[EXPECTED_RUNTIME_ANNOTATION] = expected
    if not_before is not None:
        annotations[REQUEUE_NOT_BEFORE_ANNOTATION] = not_before
    return NominationCandidate(
        running_pods=running_pods,
        # One value: non-preemptible first, as the checks run.
        preemptibility=(
            Preemptibility.SEMI_PREEMPTIBLE
            if semi and preemptible
            else Preemptibility.of_flag(preemptible)
        ),
        annotations=annotations,
        start_time=None if start is None else NOW - start,
    )


def test_constants() -> None:
    assert EXPECTED_RUNTIME_PLUGIN == "expectedruntime"
    assert EXPECTED_RUNTIME_ANNOTATION == "kai.scheduler/expected-runtime"
    assert [reason.value for reason in SkipReason] == [
        "not_running",
        "not_preemptible",
        "semi_preemptible",
        "invalid_duration",
        "missing_start",
        "clock_skew",
        "cooldown",
        "invalid_not_before",
    ]


def test_over_its_expected_runtime_is_nominated_with_the_overrun() -> None:
    assert nominate(candidate(), NOW) == NominationVerdict(True, None, s(1800))


def test_exactly_at_the_expected_runtime_is_nominated() -> None:
    assert nominate(candidate(start=s(1800)), NOW) == NominationVerdict(True, None, s(0))


def test_not_yet_over_is_not_nominated_without_a_reason() -> None:
    verdict = nominate(candidate(start=s(1800) - timedelta(microseconds=1)), NOW)
    assert verdict == NominationVerdict(False, None, None)


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"running_pods": 0}, SkipReason.NOT_RUNNING),
        ({"preemptible": False}, SkipReason.NOT_PREEMPTIBLE),
        ({"semi": True}, SkipReason.SEMI_PREEMPTIBLE),
        ({"expected": None}, SkipReason.INVALID_DURATION),
        ({"expected": "soon"}, SkipReason.INVALID_DURATION),
        ({"expected": "0s"}, SkipReason.INVALID_DURATION),
        ({"expected": "-5m"}, SkipReason.INVALID_DURATION),
        ({"start": None}, SkipReason.MISSING_START),
        ({"start": -s(1)}, SkipReason.CLOCK_SKEW),
        ({"not_before": "2026-11-21T11:00:00.000001Z"}, SkipReason.COOLDOWN),
        ({"not_before": "tomorrow"}, SkipReason.INVALID_NOT_BEFORE),
        ({"not_before": "2026-11-21T11:00:00"}, SkipReason.INVALID_NOT_BEFORE),
    ],
)
def test_each_skip_reason(kwargs: dict[str, object], reason: SkipReason) -> None:
    verdict = nominate(candidate(**kwargs), NOW)  # type: ignore[arg-type]
    assert not verdict.nominated
    assert verdict.skip_reason is reason


def test_cooldown_ends_exactly_at_not_before() -> None:
    assert nominate(candidate(not_before="2026-11-21T11:00:00Z"), NOW).nominated
    assert nominate(candidate(not_before="2026-11-21T12:00:00+01:00"), NOW).nominated


def test_the_first_failing_check_is_reported() -> None:
    everything_wrong: dict[str, object] = {
        "running_pods": 0,
        "preemptible": False,
        "semi": True,
        "expected": "bad",
        "start": None,
        "not_before": "bad",
    }
    order = ["running_pods", "preemptible", "semi", "expected", "start", "not_before"]
    expected_reasons = [
        SkipReason.NOT_RUNNING,
        SkipReason.NOT_PREEMPTIBLE,
        SkipReason.SEMI_PREEMPTIBLE,
        SkipReason.INVALID_DURATION,
        SkipReason.MISSING_START,
        SkipReason.INVALID_NOT_BEFORE,
    ]
    for fixed, reason in enumerate(expected_reasons):
        # Fix the checks before this one; every later one still fails.
        kwargs = {key: everything_wrong[key] for key in order[fixed:]}
        verdict = nominate(candidate(**kwargs), NOW)  # type: ignore[arg-type]
        assert verdict.skip_reason is reason, (fixed, verdict)


def test_clock_skew_wins_over_not_yet_due_and_cooldown() -> None:
    verdict = nominate(candidate(start=-s(60), not_before="2099-01-01T00:00:00Z"), NOW)
    assert verdict.skip_reason is SkipReason.CLOCK_SKEW


def test_not_yet_due_wins_over_an_unparsable_not_before() -> None:
    verdict = nominate(candidate(start=s(60), not_before="garbage"), NOW)
    assert verdict == NominationVerdict(False, None, None)
