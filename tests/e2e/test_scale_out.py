"""Scale-out: several `minruntime processor` instances in one consumer group share the partitions.

Real processes on the real stack (issue 10, part 4): three instances, each a static member
under its own id (`<hostname>:<metrics port>`), consume 100,000 events — podgroup lifecycles
spread over the six podgroup partitions, a queue tree on the one queues partition, nodes on
the three node partitions — produced while they run. One instance is killed with -9
mid-stream (its partitions go to the others once its session ends) and a fourth is added
mid-stream (a rebalance hands it a share). In the end nothing is lost or applied twice: every
event id is in the event log exactly once, the stored offsets are the topics' end offsets, no
dead letter, the projections hold what the events say, and `replay --verify` is equal. A
second test stops one of two instances (SIGSTOP) past its session and continues it.

No timed assertions: waits are generous; the phases' durations are printed (`pytest -s`).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minruntime.kafka_access import KafkaAccess
from minruntime.settings import Settings
from minruntime.topic_admin import describe_topics
from minruntime_dev.stack import StackStatus
from tests import cloudevents as ce
from tests.conftest import free_ports
from tests.e2e.harness import Pipeline, Subprocess, Worker, probe, wait_for

pytestmark = pytest.mark.stack

PATIENCE = 300.0  # a loaded 2-core machine: four processor starts, two rebalances
INPUTS = ("queues", "podgroups", "nodes", "nominations")

QUEUES, NODES = 1000, 1000
PODGROUPS = 28_000  # half released (4 events), half left running (3 events): 98,000 events
TOTAL = QUEUES + NODES + PODGROUPS // 2 * 4 + PODGROUPS // 2 * 3
PHASES = 10  # produced in ten parts of 10,000: kill after part 3, add an instance after part 6


class Instance:
    """One processor instance of the group: its process, its metrics port, its static id."""

    def __init__(self, process: Subprocess, port: int, settings: Settings) -> None:
        self.process = process
        self.port = port
        self.member_id = settings.processor_group_instance_id

    def ready(self) -> bool:
        """True once /readyz answers 200 (in its group, consuming, PostgreSQL answering)."""
        return probe(self.port, "/readyz")[0] == 200

    def lag_series(self) -> set[tuple[str, str]]:
        """(role, partition) of every consumer-lag series this instance exports."""
        from prometheus_client.parser import text_string_to_metric_families

        status, text = probe(self.port, "/metrics")
        assert status == 200, text
        return {
            (sample.labels["role"], sample.labels["partition"])
            for family in text_string_to_metric_families(text)
            if family.name == "minruntime_consumer_lag"
            for sample in family.samples
        }

    def applied(self) -> int:
        """Events this instance applied, from its batch log lines (loglevel info)."""
        text = self.process.log_path.read_text(errors="replace")
        return sum(int(n) for n in re.findall(r"\bapplied=(\d+)", text))


class Group:
    """A pipeline (its database, topics and consumer group) and its processor instances."""

    def __init__(self, settings: Settings, workdir: Path, **overrides: str) -> None:
        port = free_ports()
        self.pipeline = Pipeline(
            settings,
            workdir,
            "scale",
            overrides={"processor_metrics_port": str(port), **overrides},
        )
        self.instances: list[Instance] = []
        self._first_port = port

    def start_first(self) -> Instance:
        """The pipeline's own processor (instance 0)."""
        self.pipeline.spawn()
        instance = Instance(self.pipeline, self._first_port, self.pipeline.settings())
        self.instances.append(instance)
        return instance

    def add(self, name: str) -> Instance:
        """One more processor in the group, with a metrics port (and so an id) of its own."""
        port = free_ports()
        env = {**self.pipeline.env, "MINRUNTIME_PROCESSOR_METRICS_PORT": str(port)}
        process = Worker(self.pipeline, name, env, command="processor")
        self.pipeline.workers.append(process)
        process.start()
        saved = self.pipeline.env
        self.pipeline.env = env
        try:
            instance = Instance(process, port, self.pipeline.settings())
        finally:
            self.pipeline.env = saved
        self.instances.append(instance)
        return instance

    def running(self) -> list[Instance]:
        return [i for i in self.instances if i.process.process is not None]

    def check_running(self) -> None:
        for instance in self.running():
            process = instance.process.process
            assert process is not None
            if process.poll() is not None:
                raise AssertionError(
                    f"{instance.process.log_path.name} exited with {process.returncode}:\n"
                    f"{instance.process.log_tail()}"
                )

    def wait(self, check: Any, what: str, timeout: float = PATIENCE) -> Any:
        def checked() -> Any:
            self.check_running()
            return check()

        return wait_for(checked, timeout, what)

    def applied(self) -> int:
        return int(self.pipeline.scalar("SELECT count(*) FROM minruntime.event_log"))

    def wait_caught_up(self, what: str) -> dict[tuple[str, int], int]:
        """Wait until the stored offsets reach the input topics' end offsets now; return those."""
        topics = [self.pipeline.topics[role] for role in INPUTS]
        ends = _end_offsets(self.pipeline.kafka, topics)

        def caught_up() -> bool:
            stored = self.stored_offsets()
            return all(stored.get(where, 0) >= end for where, end in ends.items())

        self.wait(caught_up, what)
        return ends

    def assert_applied_once(self, events: list[tuple[str, dict[str, Any]]]) -> None:
        """Every event id in the event log exactly once, offsets at the ends, no dead letter."""
        pipeline = self.pipeline
        logged = pipeline.query("SELECT id, count(*) FROM minruntime.event_log GROUP BY 1")
        twice = [(event_id, n) for event_id, n in logged if n != 1]
        assert twice == []
        assert {event_id for event_id, _ in logged} == {event["id"] for _, event in events}
        topics = [pipeline.topics[role] for role in INPUTS]
        assert self.stored_offsets() == _end_offsets(pipeline.kafka, topics)
        assert pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters") == 0

    def assert_clean_logs(self) -> None:
        for instance in self.instances:
            log = instance.process.log_path.read_text(errors="replace")
            assert "Traceback" not in log, log[-3000:]
            assert "refusing to consume" not in log, log[-3000:]

    def stored_offsets(self) -> dict[tuple[str, int], int]:
        rows = self.pipeline.query(
            "SELECT topic, partition, next_offset FROM minruntime_state.consumer_offsets"
            " WHERE consumer_group = %s",
            (self.pipeline.group,),
        )
        return {(topic, partition): offset for topic, partition, offset in rows}


@pytest.fixture
def group(stack: StackStatus, settings: Settings, tmp_path: Path) -> Iterator[Group]:
    made = Group(settings, tmp_path)
    try:
        yield made
    finally:
        # The test runs `replay --verify` itself (an assertion of its own).
        made.pipeline.drop(verify=False)


@pytest.fixture
def laned(stack: StackStatus, settings: Settings, tmp_path: Path) -> Iterator[Group]:
    """A group whose processors deal each topic's partitions to two lanes."""
    made = Group(settings, tmp_path, processor_lanes_per_topic="2")
    try:
        yield made
    finally:
        made.pipeline.drop(verify=False)


def _produce_until(
    pipeline: Pipeline,
    events: list[tuple[str, dict[str, Any]]],
    start: int,
    end: int,
    done: Any,
    slice_size: int = 1_000,
) -> int:
    """Produce ``events[start:]`` in slices, half a second apart, until ``done()`` or ``end``;
    return how far it produced (at least ``start`` + one slice)."""
    produced = start
    while produced < end:
        _produce(pipeline, events[produced : produced + slice_size])
        produced = min(produced + slice_size, end)
        time.sleep(0.5)
        if done():
            break
    return produced


def _events(seed: int = 20261125) -> list[tuple[str, dict[str, Any]]]:
    """(role, CloudEvent) in production order: the queue tree and nodes, then podgroups.

    Podgroup lifecycles interleave in simulated time (submitted, allocated in two halves,
    released for every other one), so most events touch a podgroup an earlier batch stored.
    """
    rng = random.Random(seed)
    roots = [f"root-{r}" for r in range(10)]
    queues = [ce.queue(name) for name in roots]
    queues += [ce.queue(f"q-{i:04d}", roots[i % 10]) for i in range(QUEUES - len(roots))]
    leaves = [q["data"]["name"] for q in queues[len(roots) :]]
    nodes = [
        ce.event(
            "node.upserted", f"n-{i}", {"name": f"n-{i}", "nodePool": "default", "gpu": 8}, ce.at(0)
        )
        for i in range(NODES)
    ]
    timeline: list[tuple[float, int, dict[str, Any]]] = []
    for i in range(PODGROUPS):
        uid = f"pg-{i:05d}"
        pods = [f"{uid}-w{p}" for p in range(rng.randint(2, 4))]
        start = i * 0.01
        half = len(pods) // 2
        first = start + rng.uniform(0.5, 20)
        second = first + rng.uniform(0, 5)
        steps = [
            (start, ce.submitted(uid, rng.choice(leaves), pods, priority=50, time=ce.at(start))),
            (first, ce.allocated(uid, pods[:half], ce.at(first), node=f"n-{i % NODES}")),
            (second, ce.allocated(uid, pods[half:], ce.at(second), node=f"n-{i % NODES}")),
        ]
        if i % 2 == 0:
            end = second + rng.uniform(60, 600)
            steps.append((end, ce.released(uid, time=ce.at(end), reason="completed")))
        timeline.extend((t, len(timeline), event) for t, event in steps)
    timeline.sort(key=lambda item: (item[0], item[1]))
    return (
        [("queues", q) for q in queues]
        + [("nodes", n) for n in nodes]
        + [("podgroups", event) for _, _, event in timeline]
    )


def _produce(pipeline: Pipeline, part: list[tuple[str, dict[str, Any]]]) -> None:
    for role in INPUTS:
        events = [event for r, event in part if r == role]
        if events:
            pipeline.produce_events(role, events)


def _end_offsets(access: KafkaAccess, topics: list[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> log end offset, for the partitions that hold records."""
    described = asyncio.run(describe_topics(access, topics))
    return {
        (topic, partition): end
        for topic, kafka_topic in described.items()
        for partition, end in kafka_topic.log_ends.items()
        if end
    }


def test_three_instances_one_killed_one_added_apply_100k_events_exactly_once(
    group: Group,
) -> None:
    pipeline = group.pipeline.create(with_topics=True)
    events = _events()
    assert len(events) == TOTAL == 100_000
    size = TOTAL // PHASES
    parts = [events[i : i + size] for i in range(0, TOTAL, size)]
    started = time.monotonic()
    marks: dict[str, float] = {}

    group.start_first()
    doomed = group.add("b")
    group.add("c")
    ids = {instance.member_id for instance in group.instances}
    assert None not in ids  # static members
    assert len(ids) == 3  # under distinct ids
    group.wait(lambda: all(i.ready() for i in group.instances), "three ready instances")
    marks["three ready"] = time.monotonic() - started

    # Ready is "in the group": a rebalance after a join can still be under way while the
    # others apply thousands of events a second, so events go in slices until each applies.
    produced = _produce_until(
        pipeline, events, 0, 3 * size, lambda: all(i.applied() > 0 for i in group.instances)
    )
    _produce(pipeline, events[produced : 3 * size])
    group.wait(lambda: group.applied() >= size, f"{size} applied events")
    # Mid-stream: parts 4-10 are not even produced yet.
    assert group.applied() < TOTAL
    assert doomed.process.kill() == -signal.SIGKILL
    marks["killed b"] = time.monotonic() - started

    for part in parts[3:6]:
        _produce(pipeline, part)
    group.wait(lambda: group.applied() >= 4 * size, f"{4 * size} applied events")
    added = group.add("d")
    group.wait(added.ready, "the added instance ready (in the group, consuming)")
    marks["added d"] = time.monotonic() - started
    assert group.applied() < TOTAL

    produced = _produce_until(pipeline, events, 6 * size, TOTAL, lambda: added.applied() > 0)
    _produce(pipeline, events[produced:])
    ends = group.wait_caught_up("the stored offsets to reach the topics' end offsets")
    assert sum(ends.values()) == TOTAL
    marks["all applied"] = time.monotonic() - started
    group.check_running()

    # Nothing lost, nothing applied twice.
    group.assert_applied_once(events)
    # The projections hold what the events say.
    assert pipeline.scalar("SELECT count(*) FROM minruntime.queues") == QUEUES
    assert pipeline.scalar("SELECT count(*) FROM minruntime.nodes") == NODES
    statuses = dict(
        pipeline.query("SELECT status, count(*) FROM minruntime.podgroups GROUP BY status")
    )
    assert statuses == {"finished": PODGROUPS // 2, "running": PODGROUPS // 2}
    pods_running = sum(
        len(event["data"]["pods"])
        for _, event in events
        if event["type"] == "podgroup.submitted" and int(event["subject"][3:]) % 2 == 1
    )
    assert (
        pipeline.scalar(
            "SELECT sum(running_pods) FROM minruntime.podgroups WHERE status = 'running'"
        )
        == pods_running
    )
    # Every instance that ran took a share; the added one too (it joined mid-stream).
    shares = {i.process.log_path.name: i.applied() for i in group.instances}
    assert all(shares.values()), shares
    # Each partition's lag is reported by its owner only: the partitions that moved in the
    # rebalances are not still reported, stale, by an instance that owned them before.
    reported = [(i.process.log_path.name, i.lag_series()) for i in group.running()]
    owners = [series for _, series in reported]
    assert sum(len(series) for series in owners) == len(set().union(*owners)), reported
    group.assert_clean_logs()

    checked = pipeline.replay("--verify")
    assert checked.returncode == 0, f"{checked.stdout}\n{checked.stderr}"
    marks["verified"] = time.monotonic() - started
    print(f"\nscale-out phases (s after start): {marks}; events applied per instance: {shares}")


def test_an_instance_stalled_past_its_session_holds_nothing_up_and_rejoins(
    group: Group,
) -> None:
    """SIGSTOP one of two instances mid-stream, long past its session, then SIGCONT it.

    Wherever it froze — often inside a batch's transaction, holding its partitions' offset
    rows — the other instance takes its partitions over and applies everything meanwhile (the
    frozen transaction is ended by PostgreSQL after the sink's idle bound, 30 s). Resumed, the
    stalled instance finds its batch applied by the other (a lost connection, retried, then
    skipped), is not fooled by its stale watermarks into refusing the topic, rejoins the group
    and takes a share again.
    """
    pipeline = group.pipeline.create(with_topics=True)
    events = _events()  # 98,000: the last ones only if needed (below)
    stalled = group.start_first()
    other = group.add("b")
    group.wait(lambda: stalled.ready() and other.ready(), "two ready instances")

    # Ready is "in the group": the rebalance that splits the partitions between the two can
    # still be under way, and one instance alone applies 30,000 events in a few seconds. So
    # the first events go in slices until both have applied some.
    produced = _produce_until(
        pipeline, events, 0, 30_000, lambda: stalled.applied() > 0 and other.applied() > 0
    )
    group.wait(lambda: stalled.applied() > 0 and other.applied() > 0, "both instances applying")
    process = stalled.process.process
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)
    try:
        _produce(pipeline, events[produced:60_000])
        # Everything produced so far, the stalled instance's partitions included, while it
        # is still stopped.
        group.wait_caught_up("the other instance to apply everything, the stalled one's too")
    finally:
        os.kill(process.pid, signal.SIGCONT)
    before = stalled.applied()
    group.wait(stalled.ready, "the resumed instance ready again (in the group, consuming)")
    # The same after its rejoin: slices until it applies again (spare events if need be).
    produced = _produce_until(
        pipeline, events, 60_000, len(events), lambda: stalled.applied() > before
    )
    group.wait_caught_up("every event applied")
    events = events[:produced]
    group.check_running()
    group.assert_applied_once(events)
    assert stalled.applied() > before  # it took a share again
    group.assert_clean_logs()
    checked = pipeline.replay("--verify")
    assert checked.returncode == 0, f"{checked.stdout}\n{checked.stderr}"


def test_one_processor_with_two_lanes_per_topic_applies_100k_events_exactly_once(
    laned: Group,
) -> None:
    """``MINRUNTIME_PROCESSOR_LANES_PER_TOPIC=2``: the podgroups' six partitions (and the
    nodes' three) applied by two lanes at once; every event once, the projections what the
    events say, ``replay --verify`` equal (the order of each podgroup's events was kept)."""
    pipeline = laned.pipeline.create(with_topics=True)
    events = _events()
    instance = laned.start_first()
    laned.wait(instance.ready, "the processor ready")
    _produce(pipeline, events)
    ends = laned.wait_caught_up("the stored offsets to reach the topics' end offsets")
    assert sum(ends.values()) == TOTAL
    laned.assert_applied_once(events)
    statuses = dict(
        pipeline.query("SELECT status, count(*) FROM minruntime.podgroups GROUP BY status")
    )
    assert statuses == {"finished": PODGROUPS // 2, "running": PODGROUPS // 2}
    laned.assert_clean_logs()
    # A batch (one transaction: one applied_at) holds one lane's partitions only, and both
    # lanes applied batches: with one lane, batches of the backlog mix even and odd partitions.
    parities = pipeline.query(
        "SELECT min(partition %% 2), count(DISTINCT partition %% 2)"
        " FROM minruntime_state.event_log WHERE topic = %s GROUP BY applied_at",
        (pipeline.topics["podgroups"],),
    )
    assert {distinct for _, distinct in parities} == {1}
    assert {lane for lane, _ in parities} == {0, 1}
    checked = pipeline.replay("--verify")
    assert checked.returncode == 0, f"{checked.stdout}\n{checked.stderr}"
