"""The bridge's drift metrics: the same names and help texts as `kube diff --metrics-file`,
exported only while the replica holds the Lease and only from a check of its current term.
A fake Lease and a fake check; the real ones run in tests/e2e/test_kube_bridge_drift.py."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from pydantic import ValidationError

from minruntime.cluster import drift_watch
from minruntime.cluster.bridge import Bridge
from minruntime.cluster.drift import Difference, Drift, ServicePodGroup
from minruntime.cluster.drift_metrics import CHECKED_AT, PODGROUPS, DriftGauges
from minruntime.cluster.drift_watch import DriftWatch
from minruntime.cluster.lease import LeaseKeeper
from minruntime.cluster.mirror import Kind, MirrorOptions, kept
from minruntime.commands.kube_diff import write_metrics
from minruntime.settings import Settings

AT = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)
DRIFT = Drift((Difference("u1", "ns", "pg", "running_pods", "1", "2"),), checked=3)


def exposition(registry: CollectorRegistry) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines() if line)


def test_the_bridge_exports_what_kube_diff_writes_and_only_while_active(tmp_path: Path) -> None:
    active = [True]
    registry = CollectorRegistry()
    gauges = DriftGauges(lambda: active[0])
    registry.register(gauges)
    assert exposition(registry) == []  # nothing checked in this term yet

    gauges.record(DRIFT, AT)
    write_metrics(DRIFT, tmp_path / "drift.prom", AT)
    textfile = sorted(line for line in (tmp_path / "drift.prom").read_text().splitlines() if line)
    assert exposition(registry) == textfile
    assert f'{PODGROUPS}{{field="running_pods"}} 1.0' in textfile
    (stamp,) = [line for line in textfile if line.startswith(f"{CHECKED_AT} ")]
    assert float(stamp.split()[1]) == AT.timestamp()

    active[0] = False  # the Lease is no longer proved: a standby exports nothing
    assert exposition(registry) == []
    active[0] = True
    gauges.forget()  # the term ended: its values are not carried into the next
    assert exposition(registry) == []


class FakeLease:
    seconds = 60.0
    name = "lease"

    def try_acquire(self, now: datetime) -> bool:
        return True


def test_the_watch_checks_every_period_and_forgets_when_the_term_ends() -> None:
    gauges = DriftGauges(lambda: True)
    settings = Settings(kube_drift_seconds=0.01)
    watch = DriftWatch(settings, client=None, read_service=lambda uids: [], gauges=gauges)
    keeper = LeaseKeeper(
        FakeLease(),  # type: ignore[arg-type]
        acquired_at=0.0,
        clock=lambda: AT,
        monotonic=lambda: 1.0,
    )
    checks: list[int] = []
    recorded = threading.Event()

    def check() -> tuple[Drift, datetime]:
        checks.append(1)
        if len(checks) == 1:
            raise OSError("the database is away")  # said once, retried next period
        if len(checks) == 3:
            recorded.set()
        return DRIFT, AT

    watch.check = check  # type: ignore[method-assign]
    seen: list[object] = []

    async def term() -> None:
        task = asyncio.create_task(watch.run(keeper))
        await asyncio.to_thread(recorded.wait, 10)
        await asyncio.sleep(0.05)
        seen.append(gauges._last)
        keeper.end()
        await asyncio.wait_for(task, 10)
        seen.append(gauges._last)

    asyncio.run(term())
    assert len(checks) >= 3
    assert seen == [(DRIFT, AT), None]


def test_a_bridge_checks_drift_only_when_given_the_service_and_a_period() -> None:
    assert Bridge(Settings(), client=None).drift is None

    def reader(uids: Sequence[str]) -> list[ServicePodGroup]:
        return []

    assert Bridge(Settings(kube_drift_seconds=0), client=None, read_service=reader).drift is None
    registry = CollectorRegistry()
    bridge = Bridge(Settings(), client=None, registry=registry, read_service=reader)
    assert bridge.drift is not None
    assert bridge.drift.period == 300.0
    bridge.drift.gauges.record(DRIFT, AT)
    assert registry.get_sample_value("minruntime_kube_drift_checked_podgroups") is None  # standby


@pytest.mark.parametrize("seconds", ["-1", "86401", "soon"])
def test_the_drift_period_is_bounded(seconds: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINRUNTIME_KUBE_DRIFT_SECONDS", seconds)
    with pytest.raises(ValidationError, match="kube_drift_seconds"):
        Settings()


def test_a_check_does_not_repeat_the_mappings_warnings(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An annotation over the bounds is said when the bridge sees the PodGroup change, not
    again at every period's listing."""
    huge = {"metadata": {"name": "huge", "namespace": "ns", "annotations": {"a": "x" * 70_000}}}

    def listing(*args: object, **kwargs: object) -> dict[Kind, list[object]]:
        kept(Kind.POD_GROUP, huge, MirrorOptions())
        return {Kind.POD_GROUP: [], Kind.POD: []}

    monkeypatch.setattr(drift_watch, "list_cluster", listing)
    watch = DriftWatch(Settings(), None, lambda uids: [], DriftGauges(lambda: True))
    with caplog.at_level(logging.WARNING):
        assert watch.check()[0].checked == 0
        assert not caplog.records
        kept(Kind.POD_GROUP, huge, MirrorOptions())  # the bridge's own keeping still warns
    assert "over the contract's bounds" in caplog.text
