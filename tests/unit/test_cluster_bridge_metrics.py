"""The bridge says whether it holds its Lease (`minruntime_kube_bridge_active`): the signal of
the alert on a bridge without its Lease. A fake Lease; the real one is in the e2e tests."""

from __future__ import annotations

import asyncio
from datetime import datetime

from prometheus_client import CollectorRegistry

from minruntime.cluster.bridge import Bridge
from minruntime.cluster.lease import LeaseKeeper
from minruntime.settings import Settings

ACTIVE = "minruntime_kube_bridge_active"


def test_the_gauge_is_one_only_while_a_term_holds_the_lease() -> None:
    registry = CollectorRegistry()
    bridge = Bridge(Settings(kube_lease_seconds=60), client=None, registry=registry)
    answers = iter([False, True, True])  # standby once, then two terms
    seen: list[float | None] = []
    terms: list[LeaseKeeper] = []

    def try_acquire(now: datetime) -> bool:
        seen.append(registry.get_sample_value(ACTIVE))
        return next(answers)

    async def lead(keeper: LeaseKeeper) -> None:
        terms.append(keeper)
        seen.append(registry.get_sample_value(ACTIVE))
        if len(terms) == 2:  # the second term: it can no longer prove the Lease is held
            keeper.end()
            seen.append(registry.get_sample_value(ACTIVE))
            bridge.stop.set()

    bridge.lease.try_acquire = try_acquire  # type: ignore[method-assign]
    bridge.lease.release = lambda: None  # type: ignore[method-assign]
    bridge._lead = lead  # type: ignore[method-assign]
    bridge.settings = Settings(kube_lease_seconds=0.03)  # a short standby wait
    asyncio.run(bridge.run())

    # standby: 0, 0 (trying again); first term: 1; between terms: 0; second term: 1, then 0
    assert seen == [0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert registry.get_sample_value(ACTIVE) == 0.0
