"""The protection forecast (core.forecast): the windows that end in the horizon, soonest first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import MinRuntimeConfig, NodePoolConfigs, Queue, QueueTree, RunRules
from minruntime.core.forecast import RunningRun, expiring

NOW = datetime(2026, 11, 1, 12, tzinfo=UTC)
H = timedelta(hours=1)


def rules(preempt: timedelta, reclaim: timedelta | None, default: timedelta) -> RunRules:
    tree = QueueTree(
        [
            Queue(name="train", preempt_min_runtime=preempt, reclaim_min_runtime=reclaim),
            Queue(name="infer"),
        ]
    )
    configs = NodePoolConfigs({"default": MinRuntimeConfig(default_reclaim_min_runtime=default)})
    return RunRules(tree, configs)


def test_each_rule_that_ends_in_the_horizon_soonest_first() -> None:
    run = RunningRun("t", "train", "default", NOW - H)

    found = expiring([run], rules(4 * H, 2 * H, 90 * timedelta(minutes=1)), NOW, 3 * H)

    # reclaim from infer's root (2h) at +1h, the unknown default (90m) at +30m, preempt (4h)
    # at +3h: the horizon's end counts.
    assert [(e.window.rule.value, e.ends_at - NOW) for e in found] == [
        ("reclaim", timedelta(minutes=30)),
        ("reclaim", H),
        ("preempt", 3 * H),
    ]


def test_windows_already_over_are_not_listed() -> None:
    run = RunningRun("t", "train", "default", NOW - 10 * H)

    assert expiring([run], rules(4 * H, 2 * H, H), NOW, 24 * H) == []


def test_a_negative_horizon_is_refused() -> None:
    with pytest.raises(ValueError, match="horizon"):
        expiring([], rules(H, H, H), NOW, -H)


@given(
    started=st.integers(min_value=0, max_value=600),
    preempt=st.integers(min_value=0, max_value=600),
    horizon=st.integers(min_value=0, max_value=600),
)
def test_a_window_is_listed_iff_it_ends_inside_the_horizon(
    started: int, preempt: int, horizon: int
) -> None:
    minute = timedelta(minutes=1)
    run = RunningRun("t", "train", "default", NOW - started * minute)

    found = expiring([run], rules(preempt * minute, None, timedelta(0)), NOW, horizon * minute)

    listed = any(e.window.rule.value == "preempt" for e in found)
    assert listed == (0 < preempt - started <= horizon)
