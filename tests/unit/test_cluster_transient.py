"""A bug is not an outage on the cluster side: `cluster.transient` says which errors are waited
for (each class below), and the watcher, the first listing, the Lease and the evictor raise
the others, so the process fails with the traceback instead of retrying for ever.

A scripted list call stands in for the API server (the real one is in tests/e2e/)."""

from __future__ import annotations

import asyncio
import http.client
import logging
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    NotLeaderForPartitionError,
    ProducerFenced,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry
from urllib3.exceptions import MaxRetryError, ProtocolError, ReadTimeoutError

from minruntime.cluster import bridge as bridge_module
from minruntime.cluster.api import Inbox, Source, Watcher, WatchGarbageError, mirror_options
from minruntime.cluster.bridge import Bridge
from minruntime.cluster.evictor import DecisionRunner, EvictionRefusedError, waits
from minruntime.cluster.lanes import Lanes
from minruntime.cluster.lease import LeaseKeeper
from minruntime.cluster.metrics import EvictorMetrics
from minruntime.cluster.mirror import ClusterMirror, Emission, Kind
from minruntime.cluster.transient import transient
from minruntime.core import InvalidDurationError
from minruntime.events import Event, RequeueCommittedData
from minruntime.settings import Settings
from tests.unit.test_cluster_watch import Response, ScriptedServer, events, listing, obj

T0 = datetime(2026, 1, 1, tzinfo=UTC)

OUTAGES: list[BaseException] = [
    ConnectionRefusedError("refused"),
    ConnectionResetError("reset"),
    TimeoutError("timed out"),
    OSError("no route to host"),
    http.client.IncompleteRead(b"", 10),
    ProtocolError("Connection aborted."),
    MaxRetryError(None, "/api", reason=ConnectionRefusedError("refused")),  # type: ignore[arg-type]
    ReadTimeoutError(None, "/api", "read timed out"),  # type: ignore[arg-type]
    ApiException(status=429, reason="Too Many Requests"),
    ApiException(status=500, reason="Internal Server Error"),
    ApiException(status=503, reason="Service Unavailable"),
    ApiException(status=504, reason="Gateway Timeout"),
    KafkaConnectionError("broker away"),
    NotLeaderForPartitionError(),
    KafkaTimeoutError(),
    WatchGarbageError("Node: a watch line that is not JSON"),
]
BUGS_AND_ANSWERS: list[BaseException] = [
    KeyError("uid"),
    TypeError("'NoneType' object is not subscriptable"),
    AttributeError("'dict' object has no attribute 'kind'"),
    ValueError("invalid literal for int()"),
    InvalidDurationError("bad duration"),
    RuntimeError("a bug"),
    InterruptedError("stopped while retrying"),  # a stop, not an outage
    ApiException(status=400, reason="Bad Request"),
    ApiException(status=401, reason="Unauthorized"),
    ApiException(status=403, reason="Forbidden"),
    ApiException(status=404, reason="Not Found"),
    ApiException(status=409, reason="Conflict"),
    ApiException(status=410, reason="Gone"),  # a relist, where the watch is read
    ApiException(status=422, reason="Unprocessable Entity"),
    ApiException(status=None, reason="no status"),
    ProducerFenced(),
    RecordTooLargeError(),
    TopicAuthorizationFailedError(),
]


@pytest.mark.parametrize("error", OUTAGES, ids=lambda e: f"{type(e).__name__}-{e}"[:60])
def test_an_outage_is_transient(error: BaseException) -> None:
    assert transient(error)


@pytest.mark.parametrize("error", BUGS_AND_ANSWERS, ids=lambda e: f"{type(e).__name__}-{e}"[:60])
def test_a_bug_or_a_final_answer_is_not(error: BaseException) -> None:
    assert not transient(error)


# -- the watcher -----------------------------------------------------------------------------


def broken_keep(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return {"uid": obj["metadata"]["no such field"]}  # KeyError: a bug in what is kept


def test_a_bug_while_watching_ends_the_watch_and_is_kept_for_the_bridge() -> None:
    stop = threading.Event()
    server = ScriptedServer(stop, [listing("5", obj("a", "4")), events()])
    watcher = Watcher(Source(Kind.NODE, server, keep=broken_keep), Inbox(1000), stop, 5, 0.01)
    watcher.run()
    assert isinstance(watcher.failure, KeyError)
    assert len(server.calls) == 1  # the listing, once: not retried as an outage
    assert not stop.is_set()  # ended by the error, not by a stop


# -- the first listing -----------------------------------------------------------------------


class HeldLease:
    """The Lease as LeaseKeeper reads it (never renewed in these tests)."""

    name = "minruntime-kube-bridge"
    seconds = 60.0

    def __init__(self, answers: list[Any] | None = None) -> None:
        self.answers = answers or []

    def try_acquire(self, now: datetime) -> bool:
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)


def broken_listed(kind: Kind, objs: Iterable[Mapping[str, Any]]) -> list[Emission]:
    raise KeyError("a bug in the mirror")


def node_listing(stop: threading.Event) -> ScriptedServer:
    return ScriptedServer(stop, [listing("5", obj("a", "4")), listing("5", obj("a", "4"))])


def test_a_bug_in_the_mirror_during_a_listing_raises_at_once() -> None:
    settings = Settings(kube_backoff_max_seconds=0.01)
    bridge = Bridge(settings, client=None)
    mirror = ClusterMirror(mirror_options(settings), lambda: T0)
    mirror.listed = broken_listed  # type: ignore[method-assign]
    server = node_listing(threading.Event())
    watcher = Watcher(Source(Kind.NODE, server), Inbox(1000), threading.Event(), 5, 0.01)
    keeper = LeaseKeeper(HeldLease(), time.monotonic(), lambda: T0)  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="a bug in the mirror") as raised:
        list(bridge._list_everything(mirror, [watcher], keeper))
    assert raised.traceback[-1].name == "broken_listed"
    assert len(server.calls) == 1  # listed once: not retried as an outage


class StubProducer:
    """What the term holds of its producer here: the listing fails before anything is sent."""

    async def stop(self) -> None:
        pass


def test_a_bug_in_the_mirror_during_a_listing_fails_the_bridge_with_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = Settings(kube_backoff_max_seconds=0.01, kube_lease_seconds=60)
    bridge = Bridge(settings, client=None, registry=CollectorRegistry())
    server = node_listing(bridge.stop)
    monkeypatch.setattr(bridge_module, "sources", lambda client, s: [Source(Kind.NODE, server)])
    monkeypatch.setattr(ClusterMirror, "listed", lambda self, kind, objs: broken_listed(kind, objs))

    async def producer(keeper: LeaseKeeper) -> StubProducer:
        return StubProducer()

    async def ledger(keeper: LeaseKeeper) -> dict[str, Any]:
        return {}

    bridge.lease.try_acquire = lambda now: True  # type: ignore[method-assign]
    bridge._producer = producer  # type: ignore[method-assign]
    bridge._read_ledger = ledger  # type: ignore[method-assign]
    with pytest.raises(KeyError, match="a bug in the mirror") as raised:
        asyncio.run(bridge.run())
    shown = "".join(traceback.format_exception(raised.value))
    assert "in broken_listed" in shown
    assert "_list_everything" in shown
    assert len(server.calls) == 1  # not retried: the term did not list again
    assert not bridge.stop.is_set()


def test_a_watcher_s_failure_is_raised_by_the_bridge() -> None:
    stop = threading.Event()
    server = ScriptedServer(stop, [listing("5", obj("a", "4"))])
    watcher = Watcher(Source(Kind.NODE, server, keep=broken_keep), Inbox(1000), stop, 5, 0.01)
    watcher.run()
    with pytest.raises(KeyError):
        bridge_module._raise_failure([watcher])


# -- the Lease -------------------------------------------------------------------------------


def keep_lease(answers: list[Any]) -> LeaseKeeper:
    lease = HeldLease(answers)
    lease.seconds = 0.06  # renewed every 20 ms
    keeper = LeaseKeeper(lease, time.monotonic(), lambda: T0)  # type: ignore[arg-type]
    keeper.start()
    assert keeper.ended.wait(5)
    return keeper


def test_a_renewal_that_meets_a_bug_ends_the_term_with_it() -> None:
    keeper = keep_lease([KeyError("leaseTransitions")])
    assert isinstance(keeper.failure, KeyError)


def test_a_renewal_that_meets_an_outage_is_retried_until_the_lease_cannot_be_proved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, "minruntime.cluster.lease"):
        keeper = keep_lease([ConnectionError("API server away")] * 100)
    assert keeper.failure is None
    said = [r.getMessage() for r in caplog.records if r.name == "minruntime.cluster.lease"]
    assert said[0].endswith("ConnectionError: API server away; retrying with backoff")
    assert said[-1] == "cannot prove the lease minruntime-kube-bridge is still ours: stopping"


def test_standing_by_an_outage_is_one_status_line_and_a_bug_propagates(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bridge = Bridge(Settings(), client=None, registry=CollectorRegistry())
    away = ApiException(status=503, reason="Service Unavailable")
    answers: list[Any] = [away, away, away, True, KeyError("spec")]

    def try_acquire(now: datetime) -> bool:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)

    bridge.lease.try_acquire = try_acquire  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, "minruntime.cluster.bridge"):
        assert [asyncio.run(bridge._acquire()) for _ in range(4)] == [False, False, False, True]
    said = [r.getMessage() for r in caplog.records if r.name == "minruntime.cluster.bridge"]
    assert len(said) == 2  # the outage starts, and it ends: not a line per attempt
    assert said[0].startswith("the lease minruntime-kube-bridge: ApiException: (503)")
    assert said[1].startswith("the lease minruntime-kube-bridge is back after")
    with pytest.raises(KeyError):
        asyncio.run(bridge._acquire())


# -- the evictor -----------------------------------------------------------------------------


def test_a_lane_waits_out_an_outage_or_a_refusal_not_a_bug() -> None:
    assert waits(ConnectionError("away"))
    assert waits(EvictionRefusedError("a disruption budget (429)"))
    assert waits(ApiException(status=403, reason="Forbidden"))  # abandoned as `forbidden`
    assert not waits(KeyError("uid"))
    assert not waits(InterruptedError())


class BuggyEvictor:
    def __init__(self) -> None:
        self.pools: dict[str, str] = {}
        self.graces: dict[str, timedelta] = {}
        self.calls = 0

    def look(self, decision_id: str, decision: RequeueCommittedData) -> Any:
        self.calls += 1
        raise KeyError("metadata")


def test_a_bug_while_carrying_a_decision_out_fails_the_lanes_not_abandons_it() -> None:
    settings = Settings(kube_backoff_max_seconds=0.01, evictor_deadline_seconds=60)
    published: list[Event] = []
    evictor = BuggyEvictor()
    decision = RequeueCommittedData(
        uid="pg-a",
        nominated_by=("expectedruntime",),
        beneficiaries=("pg-b",),
        requeue_not_before=T0 + timedelta(minutes=5),
        decided_at=datetime.now(UTC),
    )

    async def main() -> Lanes:
        async def publish(event: Event) -> None:
            published.append(event)

        metrics = EvictorMetrics(CollectorRegistry())
        runner = DecisionRunner(settings, evictor, publish, asyncio.Event(), metrics)  # type: ignore[arg-type]
        lanes = Lanes()
        lanes.add("pg-a", lambda: runner.run("d-1", decision))
        for _ in range(100):
            if lanes.failure is not None:
                break
            await asyncio.sleep(0.01)
        await lanes.close()
        return lanes

    lanes = asyncio.run(main())
    assert isinstance(lanes.failure, KeyError)
    assert evictor.calls == 1  # not retried
    assert published == []  # not abandoned: a bug is not the cluster's refusal


def test_the_watch_still_retries_an_outage_before_its_bug() -> None:
    stop = threading.Event()
    server = ScriptedServer(
        stop,
        [
            ApiException(status=503, reason="Service Unavailable"),
            Response(b"", status=500),
            listing("5", obj("a", "4")),
        ],
    )
    watcher = Watcher(Source(Kind.NODE, server, keep=broken_keep), Inbox(1000), stop, 5, 0.01)
    watcher.run()
    assert isinstance(watcher.failure, KeyError)
    assert len(server.calls) == 3
