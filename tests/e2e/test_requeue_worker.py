"""The requeue worker end to end: events in through Kafka, decisions out on Kafka, SQL, metrics.

One processor and ONE `minruntime requeue-worker` (a cycle a second) serve the module. Each
test works in its own node pool with its own queue, nodes and podgroups (a `Scene`), so
capacity never crosses tests, and deletes its podgroups when it ends, so none of them is over
its expected runtime in the next test (whose metric deltas must be its own). Event times are
relative to the real clock: the worker decides at wall-clock now. Setup is ordered on purpose:
queues and nodes are applied before podgroups, pending contenders before the victim starts,
so the first cycle that sees the victim sees everything else too; tests that need several
podgroups to appear in one cycle pause the worker while they are applied.

The helpers here are shared with `test_requeue_failover.py`.
"""

from __future__ import annotations

import asyncio
import json
import math
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from minruntime.core import EXPECTED_RUNTIME_PLUGIN, RequeueReason, SkipReason
from minruntime.events import EventType
from minruntime.kafka_access import KafkaAccess
from minruntime.settings import Settings
from minruntime.stream.metrics import MAX_QUEUE_LABELS
from minruntime.topic_admin import INPUT_ROLES, topic_specs
from minruntime_dev.stack import StackStatus
from tests import cloudevents as ce
from tests.conftest import free_port_pair
from tests.e2e.harness import Pipeline, Worker, running_pipeline, wait_for

pytestmark = pytest.mark.stack

OVERRUN = {"kai.scheduler/expected-runtime": "1h"}  # every victim started 2h ago
NOT_BEFORE = "kai.scheduler/requeue-not-before"
WORKER_SOURCE = "minruntime/requeue-worker"

# A Prometheus sample: name and labels.
Metric = tuple[str, Mapping[str, str]]
CYCLES_OK: Metric = ("minruntime_requeue_cycles_total", {"result": "ok"})
ACTIVE: Metric = ("minruntime_requeue_worker_active", {})


def nominations(plugin: str) -> Metric:
    return ("kai_requeue_nominations_total", {"plugin": plugin})


def commits(nominator: str) -> Metric:
    return ("kai_requeue_commits_total", {"nominated_by": nominator})


def rollbacks(nominator: str) -> Metric:
    return ("kai_requeue_rollbacks_total", {"nominated_by": nominator})


def recorded(outcome: str) -> Metric:
    return ("minruntime_requeue_decisions_recorded_total", {"outcome": outcome})


COOLDOWN_SKIPS: Metric = (
    "kai_requeue_nomination_skipped_total",
    {"plugin": EXPECTED_RUNTIME_PLUGIN, "reason": "cooldown"},
)


# -- Prometheus -----------------------------------------------------------------------------
class Samples:
    """One scrape of a /metrics endpoint."""

    def __init__(self, text: str) -> None:
        self.values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        self.labelled: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.values[(sample.name, frozenset(sample.labels.items()))] = sample.value
                self.labelled.setdefault(sample.name, []).append(
                    (dict(sample.labels), sample.value)
                )

    def get(self, metric: Metric) -> float:
        """The sample's value; 0 when the series does not exist (yet)."""
        name, labels = metric
        return self.values.get((name, frozenset(labels.items())), 0.0)


def scrape(port: int) -> Samples:
    """GET http://127.0.0.1:port/metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return Samples(response.read().decode())


def try_scrape(port: int) -> Samples | None:
    """A scrape, or None while the endpoint is not up."""
    try:
        return scrape(port)
    except OSError:
        return None


# -- Kafka ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Published:
    """One record of the decisions topic."""

    key: bytes | None
    header_id: str | None
    event: dict[str, Any]

    @property
    def data(self) -> dict[str, Any]:
        return dict(self.event["data"])


def read_topic(pipeline: Pipeline, role: str = "requeue_decisions") -> list[Any]:
    """Every record of the role's topic, from the beginning to the current end."""
    partitions = next(s.partitions for s in topic_specs(pipeline.settings()) if s.role == role)
    return asyncio.run(_read_topic(pipeline.kafka, pipeline.topics[role], partitions))


async def _read_topic(access: KafkaAccess, topic: str, partitions: int) -> list[Any]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(**access.client_kwargs(), enable_auto_commit=False)
    await consumer.start()
    try:
        assigned = [TopicPartition(topic, partition) for partition in range(partitions)]
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        ends = await consumer.end_offsets(assigned)
        records: list[Any] = []
        deadline = asyncio.get_running_loop().time() + 60
        while [tp for tp in assigned if await consumer.position(tp) < ends[tp]]:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"could not read {topic} up to {ends}")
            batch = await consumer.getmany(*assigned, timeout_ms=500)
            for messages in batch.values():
                records.extend(messages)
        return sorted(records, key=lambda record: (record.partition, record.offset))
    finally:
        await consumer.stop()


def published(pipeline: Pipeline) -> list[Published]:
    """The decision events on the topic, as a consumer reads them."""
    return [
        Published(
            record.key,
            next((value.decode() for key, value in record.headers if key == "id"), None),
            json.loads(record.value),
        )
        for record in read_topic(pipeline)
    ]


def published_of(pipeline: Pipeline, uid: str) -> list[Published]:
    """The decision events on the topic about one podgroup (keyed by its uid)."""
    return [p for p in published(pipeline) if p.key == uid.encode()]


def wait_published(pipeline: Pipeline, decision_id: str) -> Published:
    """The topic's record of one decision, once the relay has published it."""
    found: Published = wait_for(
        lambda: next((p for p in published(pipeline) if p.event["id"] == decision_id), None),
        60,
        f"decision {decision_id} on the topic",
    )
    return found


def unpublished(pipeline: Pipeline) -> int:
    """Outbox rows not yet on Kafka."""
    return int(
        pipeline.scalar("SELECT count(*) FROM minruntime_state.outbox WHERE published_at IS NULL")
    )


# -- SQL ------------------------------------------------------------------------------------
Decision = tuple[str, str | None, list[str], list[str]]


def decisions(pipeline: Pipeline, uid: str) -> list[Decision]:
    """(outcome, reason, nominated_by, beneficiaries) of every recorded decision, in order."""
    return [
        (outcome, reason, list(nominated_by), list(beneficiaries))
        for outcome, reason, nominated_by, beneficiaries in pipeline.query(
            "SELECT outcome, reason, nominated_by, beneficiaries FROM minruntime.requeue_decisions"
            " WHERE uid = %s ORDER BY seq",
            (uid,),
        )
    ]


def committed_for(contender: str) -> Decision:
    """A commit nominated by the expected-runtime plugin that makes room for `contender`."""
    return ("committed", None, [EXPECTED_RUNTIME_PLUGIN], [contender])


def rolled_back_for(reason: str) -> Decision:
    """A rollback of the expected-runtime plugin's nomination, for `reason`."""
    return ("rolled_back", reason, [EXPECTED_RUNTIME_PLUGIN], [])


def decision_ids(pipeline: Pipeline, uid: str) -> list[str]:
    """The decision ids (= CloudEvent ids) of a podgroup's decisions, in order."""
    return [
        decision_id
        for (decision_id,) in pipeline.query(
            "SELECT decision_id FROM minruntime.requeue_decisions WHERE uid = %s ORDER BY seq",
            (uid,),
        )
    ]


def wait_decisions(pipeline: Pipeline, uid: str, count: int = 1) -> list[Decision]:
    """The podgroup's decisions once at least `count` are recorded."""
    found: list[Decision] = wait_for(
        lambda: (rows := decisions(pipeline, uid)) and len(rows) >= count and rows,
        60,
        f"{count} decision(s) about {uid}",
    )
    return found


@dataclass(frozen=True)
class PodGroupRow:
    """What `minruntime.podgroups` says about one podgroup."""

    status: str
    running_pods: int
    start_time: datetime | None
    requeue_not_before: datetime | None
    awaiting_release: bool
    is_elastic: bool
    annotations: dict[str, str]


def podgroup(pipeline: Pipeline, uid: str) -> PodGroupRow | None:
    rows = pipeline.query(
        "SELECT status, running_pods, start_time, requeue_not_before, awaiting_release,"
        " is_elastic, annotations FROM minruntime.podgroups WHERE uid = %s",
        (uid,),
    )
    return PodGroupRow(*rows[0]) if rows else None


# -- events ---------------------------------------------------------------------------------
def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def node_upserted(name: str, pool: str, gpu: float) -> dict[str, Any]:
    return ce.event(
        "node.upserted",
        name,
        {"name": name, "nodePool": pool, "gpu": gpu},
        ce.stamp(datetime.now(UTC)),
    )


def nominated(uid: str, by: str, at: datetime) -> dict[str, Any]:
    return ce.event(
        "requeue.nominated", uid, {"uid": uid, "nominatedBy": by, "reason": "e2e"}, ce.stamp(at)
    )


def annotated(uid: str, annotations: Mapping[str, str | None]) -> dict[str, Any]:
    return ce.event(
        "podgroup.annotated",
        uid,
        {"uid": uid, "annotations": dict(annotations)},
        ce.stamp(datetime.now(UTC)),
    )


def deleted(uid: str) -> dict[str, Any]:
    return ce.event("podgroup.deleted", uid, {"uid": uid}, ce.stamp(datetime.now(UTC)))


@dataclass
class Scene:
    """One test's private node pool, queue, nodes and podgroups on a shared pipeline."""

    pipeline: Pipeline
    name: str
    # Victims start two hours ago: over their one-hour expected runtime at once.
    base: datetime = field(default_factory=lambda: datetime.now(UTC) - timedelta(hours=2))
    pods: dict[str, list[str]] = field(default_factory=dict)

    @property
    def pool(self) -> str:
        return f"{self.name}-pool"

    @property
    def queue(self) -> str:
        return f"{self.name}-q"

    def node(self, short: str) -> str:
        return f"{self.name}-{short}"

    def uid(self, short: str) -> str:
        return f"{self.name}-{short}"

    def prepare(self, nodes: Mapping[str, float], *, preempt: str | None = None) -> None:
        """The queue and the nodes, applied before any podgroup of the scene is sent."""
        now = ce.stamp(datetime.now(UTC))
        self.pipeline.produce_events("queues", [ce.queue(self.queue, preempt=preempt, time=now)])
        self.add_nodes(nodes)
        wait_for(
            lambda: self.pipeline.scalar(
                "SELECT count(*) FROM minruntime.queues WHERE name = %s", (self.queue,)
            ),
            60,
            f"queue {self.queue}\n{self.pipeline.log_tail()}",
        )

    def add_nodes(self, nodes: Mapping[str, float]) -> None:
        """Upsert nodes of the scene's pool and wait until they are applied."""
        names = [self.node(short) for short in nodes]
        self.pipeline.produce_events(
            "nodes", [node_upserted(self.node(s), self.pool, gpu) for s, gpu in nodes.items()]
        )
        wait_for(
            lambda: (
                self.pipeline.scalar(
                    "SELECT count(*) FROM minruntime.nodes WHERE name = ANY(%s)", (names,)
                )
                == len(names)
            ),
            60,
            f"nodes {names}\n{self.pipeline.log_tail()}",
        )

    def job(
        self,
        short: str,
        pods: int,
        *,
        priority: int,
        gpu: float = 1.0,
        min_available: int | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """podgroup.submitted of `pods` pods of `gpu` GPUs in the scene's pool."""
        uid = self.uid(short)
        self.pods[uid] = [f"p{i}" for i in range(pods)]
        return ce.submitted(
            uid,
            self.queue,
            self.pods[uid],
            priority=priority,
            min_available=min_available,
            gpu=gpu,
            annotations=annotations,
            node_pool=self.pool,
            time=ce.stamp(datetime.now(UTC)),
        )

    def allocation(self, uid: str, node: str, at: datetime) -> dict[str, Any]:
        """All of the podgroup's pods allocated on one node of the scene at `at`."""
        return ce.allocated(uid, self.pods[uid], ce.stamp(at), self.node(node))

    def send(self, *events: Mapping[str, Any]) -> None:
        self.pipeline.produce_events("podgroups", events)

    def pend(self, submitted: Mapping[str, Any]) -> str:
        """Submit and wait until the podgroup is pending."""
        uid = str(submitted["subject"])
        self.send(submitted)
        self.wait_status(uid, "pending")
        return uid

    def start(self, submitted: Mapping[str, Any], node: str, at: datetime | None = None) -> str:
        """Submit, allocate every pod on `node` at `at` (default: the scene's base), wait."""
        uid = str(submitted["subject"])
        self.send(submitted, self.allocation(uid, node, at or self.base))
        self.wait_status(uid, "running")
        return uid

    def wait_status(self, uid: str, status: str) -> None:
        wait_for(
            lambda: (row := podgroup(self.pipeline, uid)) is not None and row.status == status,
            60,
            f"{uid} {status}\n{self.pipeline.log_tail()}",
        )

    def row(self, uid: str) -> PodGroupRow:
        found = podgroup(self.pipeline, uid)
        assert found is not None, uid
        return found

    def clear(self) -> None:
        """Delete every podgroup of the scene: none of them runs or waits in later tests."""
        if not self.pods:
            return
        self.send(*(deleted(uid) for uid in self.pods))
        for uid in self.pods:
            self.wait_status(uid, "deleted")
        self.pods = {}


# -- the module's pipeline --------------------------------------------------------------------
@dataclass
class RequeueStack:
    """The shared pipeline, its one worker and both metrics endpoints."""

    pipeline: Pipeline
    worker: Worker
    worker_port: int
    processor_port: int

    def metrics(self) -> Samples:
        self.check_worker()
        return scrape(self.worker_port)

    def check_worker(self) -> None:
        assert self.worker.alive(), f"the worker exited:\n{self.worker.log_tail()}"
        self.pipeline.check_alive()

    def wait_active(self) -> None:
        def active() -> bool:
            self.check_worker()
            samples = try_scrape(self.worker_port)
            return samples is not None and samples.get(ACTIVE) == 1 and samples.get(CYCLES_OK) > 0

        wait_for(active, 60, f"the worker to be active\n{self.worker.log_tail()}")

    def wait_cycles(self, count: int) -> None:
        """Wait until `count` more cycles have finished (state seen by then is decided)."""
        target = self.metrics().get(CYCLES_OK) + count
        wait_for(
            lambda: self.metrics().get(CYCLES_OK) >= target,
            60,
            f"{count} requeue cycles\n{self.worker.log_tail()}",
        )

    def steady(self, *metrics: Metric) -> list[float]:
        """The counters' values once two whole cycles in a row leave them unchanged."""

        def window() -> list[float] | None:
            before = self.metrics()
            self.wait_cycles(2)
            after = self.metrics()
            values = [after.get(metric) for metric in metrics]
            return values if values == [before.get(metric) for metric in metrics] else None

        found: list[float] = wait_for(window, 60, f"{metrics} to stop moving")
        return found

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the worker; restart it (fresh counters) once the block has applied its events."""
        self.worker.stop()
        try:
            yield
        finally:
            self.worker.start()
            self.wait_active()


@contextmanager
def requeue_stack(settings: Settings, workdir: Path, name: str) -> Iterator[RequeueStack]:
    """A private pipeline with one active worker replica (cycles every second), dropped after."""
    port = free_port_pair()
    with running_pipeline(
        settings,
        workdir,
        name,
        processor_metrics_port=str(port + 1),
        requeue_interval_seconds="1",
    ) as pipeline:
        worker = pipeline.start_worker("w", env={"MINRUNTIME_WORKER_METRICS_PORT": str(port)})
        running = RequeueStack(pipeline, worker, port, port + 1)
        running.wait_active()
        yield running


def requeue_stack_fixture(name: str) -> Any:
    """A module's ``rq`` fixture: one ``requeue_stack`` named ``name`` for the module."""

    @pytest.fixture(scope="module")
    def rq(
        stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[RequeueStack]:
        with requeue_stack(settings, tmp_path_factory.mktemp(name), name) as running:
            yield running

    return rq


rq = requeue_stack_fixture("rq")


@pytest.fixture
def scenes(rq: RequeueStack) -> Iterator[Callable[[str], Scene]]:
    """Make scenes; their podgroups are deleted when the test ends."""
    made: list[Scene] = []

    def make(name: str) -> Scene:
        scene = Scene(rq.pipeline, name)
        made.append(scene)
        return scene

    yield make
    for scene in made:
        scene.clear()


def no_cooldown(row: PodGroupRow) -> bool:
    return row.requeue_not_before is None and NOT_BEFORE not in row.annotations


# -- SEMANTICS.md §9: the five scenarios --------------------------------------------------------
def test_no_contention_rolls_back_and_the_job_keeps_running(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    s = scenes("s1")
    s.prepare({"n1": 8})
    # Pending, and it would fit once the victim is gone, but its priority is lower.
    low = s.pend(s.job("low", 4, priority=10, min_available=4))
    victim = s.start(s.job("v", 8, priority=50, annotations=OVERRUN), "n1")

    wait_decisions(rq.pipeline, victim)
    rq.wait_cycles(3)

    # Recorded once (the audit log shows changes, not one row per cycle).
    assert decisions(rq.pipeline, victim) == [rolled_back_for("no_higher_priority_pending")]
    row = s.row(victim)
    assert (row.status, row.running_pods, row.awaiting_release) == ("running", 8, False)
    assert no_cooldown(row)
    assert s.row(low).status == "pending"
    [decision_id] = decision_ids(rq.pipeline, victim)
    event = wait_published(rq.pipeline, decision_id)
    assert event.header_id == decision_id
    assert (event.key, event.event["type"], event.event["source"]) == (
        victim.encode(),
        "requeue.rolled-back",
        WORKER_SOURCE,
    )
    assert event.data["uid"] == victim
    assert event.data["nominatedBy"] == [EXPECTED_RUNTIME_PLUGIN]
    assert event.data["reason"] == "no_higher_priority_pending"
    assert [p.event["type"] for p in published_of(rq.pipeline, victim)] == ["requeue.rolled-back"]


def test_contention_commits_and_publishes_the_eviction(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    s = scenes("s2")
    s.prepare({"n1": 8})
    contender = s.pend(s.job("hi", 4, priority=100, min_available=4))
    job = s.job("v", 8, priority=50, annotations={**OVERRUN, "kai.scheduler/requeue-delay": "10m"})
    victim = s.pend(job)
    # Before its run, nothing about a cooldown.
    assert no_cooldown(s.row(victim))
    before = datetime.now(UTC)
    s.send(s.allocation(victim, "n1", s.base))

    wait_decisions(rq.pipeline, victim)
    [decision_id] = decision_ids(rq.pipeline, victim)
    event = wait_published(rq.pipeline, decision_id)

    assert decisions(rq.pipeline, victim) == [committed_for(contender)]
    assert event.header_id == decision_id == event.event["id"]
    assert (event.key, event.event["type"], event.event["source"], event.event["subject"]) == (
        victim.encode(),
        "requeue.committed",
        WORKER_SOURCE,
        victim,
    )
    data = event.data
    assert (data["uid"], data["nominatedBy"], data["beneficiaries"]) == (
        victim,
        [EXPECTED_RUNTIME_PLUGIN],
        [contender],
    )
    decided_at, not_before = parse_time(data["decidedAt"]), parse_time(data["requeueNotBefore"])
    assert before <= decided_at <= datetime.now(UTC)
    # The podgroup's requeue-delay annotation, counted from the commit.
    assert not_before - decided_at == timedelta(minutes=10)
    assert parse_time(data["runStart"]) == s.base
    assert sorted((p["podgroup"], p["pod"], p["node"], p["gpu"]) for p in data["placements"]) == [
        (contender, f"p{i}", s.node("n1"), 1.0) for i in range(4)
    ]
    sql = rq.pipeline.query(
        "SELECT decided_at, requeue_not_before FROM minruntime.requeue_decisions"
        " WHERE decision_id = %s",
        (decision_id,),
    )
    assert sql == [(decided_at, not_before)]
    row = s.row(victim)
    # The cluster has not evicted it yet: still running, awaiting release, in cooldown.
    assert (row.status, row.awaiting_release) == ("running", True)
    assert row.requeue_not_before == not_before
    assert row.annotations[NOT_BEFORE] == data["requeueNotBefore"]
    assert s.row(contender).status == "pending"
    # Not attempted again while it awaits its release.
    rq.wait_cycles(3)
    assert [d[0] for d in decisions(rq.pipeline, victim)] == ["committed"]
    assert [p.event["id"] for p in published_of(rq.pipeline, victim)] == [decision_id]


def test_a_job_just_requeued_is_not_nominated_again_during_its_cooldown(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    s = scenes("s3")
    s.prepare({"n1": 4})
    first_contender = s.pend(s.job("hi", 4, priority=100, min_available=4))
    commits_before = rq.metrics().get(commits(EXPECTED_RUNTIME_PLUGIN))
    victim = s.start(s.job("v", 4, priority=50, annotations=OVERRUN), "n1")
    [committed] = wait_decisions(rq.pipeline, victim)
    assert committed == committed_for(first_contender)
    not_before = s.row(victim).requeue_not_before
    assert not_before is not None
    wait_for(
        lambda: rq.metrics().get(commits(EXPECTED_RUNTIME_PLUGIN)) == commits_before + 1,
        30,
        "the commit to be counted",
    )

    # The cluster evicts the victim and runs the contender in its place; the victim is
    # scheduled again on a new node, now with a one-second expected runtime.
    now = datetime.now(UTC)
    s.send(
        ce.released(victim, time=ce.stamp(now - timedelta(seconds=20)), reason="completed"),
        s.allocation(first_contender, "n1", now - timedelta(seconds=19)),
    )
    s.wait_status(victim, "finished")
    s.wait_status(first_contender, "running")
    s.add_nodes({"n2": 4})
    # It would fit on n2 if the victim were evicted again.
    second_contender = s.pend(s.job("hi2", 4, priority=100, min_available=4))
    [quiet] = rq.steady(COOLDOWN_SKIPS)
    restart = datetime.now(UTC) - timedelta(seconds=10)
    s.send(
        annotated(victim, {"kai.scheduler/expected-runtime": "1s"}),
        s.allocation(victim, "n2", restart),
    )
    s.wait_status(victim, "running")

    wait_for(
        lambda: rq.metrics().get(COOLDOWN_SKIPS) > quiet,
        60,
        f"a cooldown skip\n{rq.worker.log_tail()}",
    )
    rq.wait_cycles(3)

    row = s.row(victim)
    assert row.start_time == restart  # a new run...
    assert row.requeue_not_before == not_before  # ...still inside the first commit's cooldown
    # Not a candidate at all: no decision of any kind after the commit, no second commit.
    assert decisions(rq.pipeline, victim) == [committed]
    assert s.row(second_contender).status == "pending"
    assert rq.metrics().get(commits(EXPECTED_RUNTIME_PLUGIN)) == commits_before + 1


def test_inside_its_min_runtime_a_job_is_nominated_but_not_evicted(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    s = scenes("s4")
    s.prepare({"n1": 8}, preempt="4h")  # started 2h ago: protected for two more hours
    contender = s.pend(s.job("hi", 4, priority=100, min_available=4))
    job = s.job("v", 8, priority=50, annotations=OVERRUN)
    victim = s.pend(job)
    nominated_before, rolled_back_before, committed_before = rq.steady(
        nominations(EXPECTED_RUNTIME_PLUGIN),
        rollbacks(EXPECTED_RUNTIME_PLUGIN),
        commits(EXPECTED_RUNTIME_PLUGIN),
    )
    s.send(s.allocation(victim, "n1", s.base))

    wait_decisions(rq.pipeline, victim)
    rq.wait_cycles(3)

    assert decisions(rq.pipeline, victim) == [rolled_back_for("protected")]
    samples = rq.metrics()
    assert samples.get(nominations(EXPECTED_RUNTIME_PLUGIN)) > nominated_before
    assert samples.get(rollbacks(EXPECTED_RUNTIME_PLUGIN)) > rolled_back_before
    assert samples.get(commits(EXPECTED_RUNTIME_PLUGIN)) == committed_before
    row = s.row(victim)
    assert (row.status, row.running_pods, row.awaiting_release) == ("running", 8, False)
    assert no_cooldown(row)
    assert s.row(contender).status == "pending"
    assert rq.pipeline.scalar("SELECT minruntime.is_protected(%s, %s)", (victim, s.queue)) is True
    [decision_id] = decision_ids(rq.pipeline, victim)
    assert wait_published(rq.pipeline, decision_id).data["reason"] == "protected"
    assert [p.event["type"] for p in published_of(rq.pipeline, victim)] == ["requeue.rolled-back"]


def test_two_nominators_make_one_attempt_counted_under_both(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    s = scenes("s5")
    s.prepare({"n1": 8})
    # Paused: the first cycle sees the contender, the over-running job and the external
    # nomination together (they travel on three topics).
    with rq.paused():
        contender = s.pend(s.job("hi", 4, priority=100, min_available=4))
        victim = s.start(s.job("v", 8, priority=50, annotations=OVERRUN), "n1")
        rq.pipeline.produce_events(
            "nominations", [nominated(victim, "proportion", datetime.now(UTC))]
        )
        wait_for(
            lambda: rq.pipeline.scalar(
                "SELECT count(*) FROM minruntime.nominations WHERE uid = %s", (victim,)
            ),
            60,
            "the external nomination",
        )

    wait_decisions(rq.pipeline, victim)
    rq.wait_cycles(3)

    both = [EXPECTED_RUNTIME_PLUGIN, "proportion"]
    # One attempt, by both. The commit consumed proportion's nomination, and expectedruntime
    # sees the cooldown: nothing more is attempted or recorded.
    assert decisions(rq.pipeline, victim) == [("committed", None, both, [contender])]
    assert (
        rq.pipeline.scalar("SELECT count(*) FROM minruntime.nominations WHERE uid = %s", (victim,))
        == 0
    )
    (decision_id,) = decision_ids(rq.pipeline, victim)
    event = wait_published(rq.pipeline, decision_id)
    assert (event.event["type"], event.data["nominatedBy"]) == ("requeue.committed", both)
    # The restarted worker counts from zero: this one attempt, under both nominators.
    samples = rq.metrics()
    assert samples.get(commits(EXPECTED_RUNTIME_PLUGIN)) == 1
    assert samples.get(commits("proportion")) == 1
    assert samples.get(rollbacks("proportion")) == 0
    assert samples.get(recorded("committed")) == 1
    assert samples.get(nominations("proportion")) == 1
    assert [p.event["type"] for p in published_of(rq.pipeline, victim)] == ["requeue.committed"]


# -- planning end to end ----------------------------------------------------------------------
def test_a_protected_elastic_job_is_never_requeued_an_unprotected_one_is(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    # Three elastic jobs (4 pods, fewer required), each alone in its pool with a contender
    # that needs only half of its GPUs; a requeue always evicts the whole podgroup.
    cases = {
        "el-prot": ("4h", 2, "rolled_back"),  # protected, minAvailable 2 > 0: never
        "el-free": ("0s", 2, "committed"),  # its min runtime is over: may lose every pod
        "el-zero": ("4h", 0, "committed"),  # protected, but minAvailable 0: evictable
    }
    victims: dict[str, tuple[Scene, str, str]] = {}
    for name, (preempt, min_available, _) in cases.items():
        s = scenes(name)
        s.prepare({"n1": 4}, preempt=preempt)
        contender = s.pend(s.job("hi", 2, priority=100, min_available=2))
        job = s.job("v", 4, priority=50, min_available=min_available, annotations=OVERRUN)
        victims[name] = (s, s.start(job, "n1"), contender)

    for name, (s, victim, contender) in victims.items():
        outcome = cases[name][2]
        expected: Decision = (
            committed_for(contender) if outcome == "committed" else rolled_back_for("protected")
        )
        assert wait_decisions(rq.pipeline, victim) == [expected], name
        row = s.row(victim)
        assert row.is_elastic, name
        assert (row.requeue_not_before is not None) == (outcome == "committed"), name
    rq.wait_cycles(3)
    s, victim, _ = victims["el-prot"]
    assert [d[0] for d in decisions(rq.pipeline, victim)] == ["rolled_back"]
    assert (s.row(victim).status, s.row(victim).running_pods) == ("running", 4)


def test_one_contender_two_candidates_one_commit(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    s = scenes("two")
    s.prepare({"n1": 4, "n2": 4})
    with rq.paused():
        contender = s.pend(s.job("hi", 4, priority=100, min_available=4))
        # Same priority and GPUs; `b` started 30 minutes after `a`, so evicting it loses less
        # work and it goes first (docs/rule-engine.md, "Checkpoint preference"): `a` is the
        # one further over its expected runtime, which is now only the tie-break.
        second = s.start(
            s.job("a", 4, priority=50, annotations=OVERRUN), "n1", s.base - timedelta(minutes=30)
        )
        first = s.start(s.job("b", 4, priority=50, annotations=OVERRUN), "n2")

    wait_decisions(rq.pipeline, first)
    wait_decisions(rq.pipeline, second)
    rq.wait_cycles(3)

    assert decisions(rq.pipeline, first) == [committed_for(contender)]
    # The contender was served by the first eviction: nobody else needs the second.
    assert decisions(rq.pipeline, second) == [rolled_back_for("no_higher_priority_pending")]
    decided = rq.pipeline.query(
        "SELECT DISTINCT decided_at FROM minruntime.requeue_decisions WHERE uid = ANY(%s)",
        ([first, second],),
    )
    assert len(decided) == 1  # one cycle decided both
    assert s.row(first).awaiting_release
    assert no_cooldown(s.row(second))
    assert s.row(second).status == "running"
    assert rq.metrics().get(commits(EXPECTED_RUNTIME_PLUGIN)) == 1


def test_a_gang_that_fits_no_node_even_after_the_eviction_rolls_back(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    # big: one pod needs 6 GPUs, no node has more than 4.
    big = scenes("nofit-big")
    big.prepare({"n1": 4, "n2": 4})
    big_contender = big.pend(big.job("hi", 1, priority=100, gpu=6))
    # packed: 3 pods of 2 GPUs must all run; after the eviction n1 holds two of them and n2
    # is full (a job without an expected runtime, never nominated).
    packed = scenes("nofit-packed")
    packed.prepare({"n1": 4, "n2": 4})
    packed.start(packed.job("filler", 4, priority=50), "n2")
    packed_contender = packed.pend(packed.job("hi", 3, priority=100, gpu=2, min_available=3))
    victims = [
        (big, big.start(big.job("v", 4, priority=50, annotations=OVERRUN), "n1"), big_contender),
        (
            packed,
            packed.start(packed.job("v", 4, priority=50, annotations=OVERRUN), "n1"),
            packed_contender,
        ),
    ]

    for s, victim, contender in victims:
        assert wait_decisions(rq.pipeline, victim) == [rolled_back_for("no_contender_fits")], s.name
        assert no_cooldown(s.row(victim)), s.name
        assert s.row(victim).status == "running", s.name
        assert s.row(contender).status == "pending", s.name
    assert decisions(rq.pipeline, packed.uid("filler")) == []


# -- metrics ------------------------------------------------------------------------------------
FINITE_REASONS = {r.value for r in RequeueReason} | {r.value for r in SkipReason}


def test_processor_and_worker_metrics_have_finite_labels(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    s = scenes("metrics")
    s.prepare({"n1": 2})
    victim = s.start(s.job("v", 2, priority=50, annotations=OVERRUN), "n1")
    # A nominator the worker does not know by name: reported as "other", never by its name.
    stranger: Metric = rollbacks("other")
    stranger_before = rq.metrics().get(stranger)
    rq.pipeline.produce_events(
        "nominations", [nominated(victim, "team-x-autoscaler", datetime.now(UTC))]
    )
    wait_for(lambda: rq.metrics().get(stranger) > stranger_before, 60, "an 'other' rollback")
    s.clear()
    dead_before = rq.pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters")
    rq.pipeline.produce("nodes", [(b"metrics-bad", b"{not json")])

    dead: Metric = ("minruntime_events_dead_lettered_total", {"role": "nodes", "kind": "not_json"})
    wait_for(
        lambda: (samples := try_scrape(rq.processor_port)) is not None and samples.get(dead) == 1,
        60,
        f"the dead letter to be counted\n{rq.pipeline.log_tail()}",
    )
    processor = scrape(rq.processor_port)

    assert rq.pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters") == dead_before + 1
    assert sum(v for _, v in processor.labelled["minruntime_events_dead_lettered_total"]) == 1
    applied = "minruntime_events_applied_total"
    for role, event_type in [
        ("queues", "queue.upserted"),
        ("nodes", "node.upserted"),
        ("podgroups", "podgroup.submitted"),
        ("podgroups", "podgroup.allocated"),
        ("podgroups", "podgroup.deleted"),
        ("nominations", "requeue.nominated"),
    ]:
        assert processor.get((applied, {"role": role, "type": event_type})) >= 1, event_type
    roles = {role.value for role in INPUT_ROLES}
    types = {t.value for t in EventType}
    partitions = {spec.role.value: spec.partitions for spec in topic_specs(rq.pipeline.settings())}
    for labels, _ in processor.labelled[applied]:
        assert labels["role"] in roles, labels
        assert labels["type"] in types, labels
    lags = processor.labelled["minruntime_consumer_lag"]
    assert {labels["role"] for labels, _ in lags} >= {"queues", "nodes", "podgroups"}
    for labels, value in lags:
        assert labels["role"] in roles, labels
        assert 0 <= int(labels["partition"]) < partitions[labels["role"]], labels
        assert math.isfinite(value), (labels, value)
        assert value >= 0, (labels, value)

    worker = rq.metrics()
    nominators = {*Settings().known_nominators, "other"}
    for name in (
        "kai_requeue_nominations_total",
        "kai_requeue_nomination_skipped_total",
        "kai_requeue_commits_total",
        "kai_requeue_rollbacks_total",
        "kai_requeue_skipped_total",
    ):
        for labels, value in worker.labelled.get(name, []):
            assert set(labels.values()) <= nominators | FINITE_REASONS, (name, labels)
            assert math.isfinite(value), (name, labels)
    # No series is named after a podgroup, queue, node, nominator or topic.
    names = {
        name
        for (name,) in rq.pipeline.query(
            "SELECT uid FROM minruntime.podgroups UNION SELECT name FROM minruntime.queues"
            " UNION SELECT name FROM minruntime.nodes"
        )
    } | {"team-x-autoscaler", *rq.pipeline.topics.values()}
    # Save one, asked for by name (issue 17): GPU-seconds lost by queue, a queue of the tree or
    # "unknown", at most MAX_QUEUE_LABELS of them and then "other" (docs/pipeline.md).
    # The protection-honoured SLO's evicted runs (issue 28) are counted by queue the same way.
    by_queue = ("minruntime_gpu_seconds_lost_total", "minruntime_evicted_runs_total")
    queues = {name for (name,) in rq.pipeline.query("SELECT name FROM minruntime.queues")}
    for counted in by_queue:
        lost = {labels["queue"] for labels, _ in processor.labelled.get(counted, [])}
        assert lost <= queues | {"unknown", "other"}, (counted, lost)
        assert len(lost) <= MAX_QUEUE_LABELS + 2
    bounded = tuple(counted.removesuffix("_total") for counted in by_queue)
    every_label = {
        value
        for samples in (processor, worker)
        for name, series in samples.labelled.items()
        for labels, _ in series
        for key, value in labels.items()
        # the counter's samples and its `_created` series carry the same bounded label
        if not (name.startswith(bounded) and key == "queue")
    }
    assert len(names) > 10
    assert not every_label & names
