"""`minruntime protection forecast` against the real projections: the windows that end next,
per rule, from the live state; nothing written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from minruntime.audit.forecast import describe, forecast
from minruntime.commands.forecast import forecast_lines
from minruntime.errors import UserError
from minruntime.store.unit import Units
from tests.cloudevents import allocated, config, queue, submitted
from tests.integration.helpers import Feed
from tests.integration.test_requeue_plan import contents


def test_the_windows_ending_in_the_horizon_soonest_first(engine: sa.Engine, feed: Feed) -> None:
    now = datetime.now(UTC)
    feed.send(
        queue("train", preempt="4h", reclaim="2h", time=now),
        queue("infer", preempt="10m", time=now),
        config(defaultReclaimMinRuntime="30m", time=now),
        submitted("t", "train", 1, time=now - timedelta(hours=1)),
        allocated("t", 1, time=now - timedelta(hours=1)),
        submitted("i", "infer", 1, time=now),
        allocated("i", 1, time=now),
    )
    before = contents(engine)

    found = describe(forecast(Units(engine), hours=2))

    assert contents(engine) == before
    # t (started an hour ago): reclaim from infer's root ends at +1h, the unknown default
    # (30m) ended already, preempt (4h) at +3h is beyond 2h. i: preempt 10m at +10m; reclaim
    # from train's root: infer's reclaim unset -> the 30m default at +30m, and the unknown 30m.
    got = [(e["uid"], e["rule"], e["preemptors"], round(e["in"] / 60)) for e in found["expiries"]]
    assert got == [
        ("i", "preempt", "preempt", 10),
        ("i", "reclaim", "reclaim from another root", 30),
        ("i", "reclaim", "reclaim from an unknown queue", 30),
        ("t", "reclaim", "reclaim from another root", 60),
    ]
    assert found["running"] == 2


def test_one_queue_and_bad_options(engine: sa.Engine, feed: Feed) -> None:
    now = datetime.now(UTC)
    feed.send(
        queue("infer", preempt="10m", time=now),
        submitted("i", "infer", 1, time=now),
        allocated("i", 1, time=now),
    )

    only = forecast(Units(engine), hours=1, queue="infer")

    assert {e.uid for e in only.expiries} == {"i"}
    assert forecast_lines(only)[0].startswith(
        "1 protection window(s) of 1 running podgroup(s) in queue infer"
    )
    with pytest.raises(UserError, match="--queue 'nope'"):
        forecast(Units(engine), hours=1, queue="nope")
    with pytest.raises(UserError, match="--hours 0"):
        forecast(Units(engine), hours=0)
