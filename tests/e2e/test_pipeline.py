"""Events in, SQL answers out: the real processor between the real Kafka and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest

from minruntime.kafka_access import start_client
from minruntime.settings import Settings
from minruntime.topic_admin import INPUT_ROLES, topic_specs
from minruntime_dev.stack import StackStatus
from tests import cloudevents as ce
from tests.e2e.harness import Pipeline, wait_for

pytestmark = pytest.mark.stack


def test_design_document_examples_end_to_end(pipeline: Pipeline) -> None:
    before = pipeline.scalar("SELECT count(*) FROM minruntime.event_log")
    pipeline.produce_events("queues", [*ce.design_tree(), ce.config()])
    jobs = []
    for leaf in ("leaf1", "leaf2", "leaf3"):
        uid = f"ex-{leaf}"
        jobs += [
            ce.submitted(uid, leaf, ["p0"], priority=50, time=ce.at(0)),
            ce.allocated(uid, ["p0"], ce.at(10)),
        ]
    pipeline.produce_events("podgroups", jobs)
    pipeline.wait_applied(before + 8 + 6, timeout=30)

    preempt = {
        uid: (min_runtime, source)
        for uid, min_runtime, source in pipeline.query(
            "SELECT uid, min_runtime, resolved_from FROM minruntime.preempt_protection"
            " WHERE uid LIKE 'ex-%'"
        )
    }
    # Preempt with B=600s, leaf1=300s: leaf1 → 300s (leaf1), leaf2 → 600s (B).
    assert preempt["ex-leaf1"] == (timedelta(seconds=300), "leaf1")
    assert preempt["ex-leaf2"] == (timedelta(seconds=600), "B")

    def reclaim(reclaimer: str, uid: str) -> tuple[timedelta, str | None]:
        rows = pipeline.query(
            "SELECT min_runtime, resolved_from FROM minruntime.reclaim_protection(%s)"
            " WHERE uid = %s",
            (reclaimer, uid),
        )
        assert len(rows) == 1
        return rows[0][0], rows[0][1]

    assert reclaim("leaf1", "ex-leaf3") == (timedelta(seconds=60), "D")
    assert reclaim("leaf1", "ex-leaf2") == (timedelta(seconds=180), "leaf2")
    assert reclaim("leaf3", "ex-leaf1") == (timedelta(seconds=600), "B")

    # Started at T0+10s (event time); reclaim window from leaf1 is 60s: strict boundary.
    def protected(uid: str, queue: str, seconds: float) -> bool:
        return bool(
            pipeline.scalar(
                "SELECT minruntime.is_protected(%s, %s, %s::timestamptz)",
                (uid, queue, ce.at(seconds)),
            )
        )

    assert protected("ex-leaf3", "leaf1", 69.999)
    assert not protected("ex-leaf3", "leaf1", 70)
    # Same queue → preempt rule: leaf1's own 300s.
    assert protected("ex-leaf1", "leaf1", 309)
    assert not protected("ex-leaf1", "leaf1", 310)


def test_start_time_follows_event_time(pipeline: Pipeline) -> None:
    uid = "elastic-start"
    pipeline.produce_events(
        "podgroups",
        [ce.submitted(uid, "leaf2", ["a", "b"], priority=50, min_available=1, time=ce.at(100))],
    )

    def row() -> tuple:
        rows = pipeline.query(
            "SELECT status, start_time, running_pods, is_elastic FROM minruntime.podgroups"
            " WHERE uid = %s",
            (uid,),
        )
        return rows[0] if rows else ()

    wait_for(lambda: row() and row()[0] == "pending", what="the submission")
    steps = [
        (ce.allocated(uid, ["a"], ce.at(200)), ("running", ce.at(200), 1)),
        (ce.allocated(uid, ["b"], ce.at(300)), ("running", ce.at(200), 2)),  # scale-up keeps it
        (
            ce.released(uid, time=ce.at(400), reason="completed"),
            ("finished", None, 0),
        ),  # full release ends the run
        (ce.allocated(uid, ["a"], ce.at(500)), ("running", ce.at(500), 1)),  # a new run
    ]
    for event, (status, start, running) in steps:
        pipeline.produce_events("podgroups", [event])
        wait_for(
            lambda status=status, running=running: row()[0] == status and row()[2] == running,
            what=f"{status} with {running} pods",
        )
        current = row()
        expected_start = None if start is None else current[1].fromisoformat(start)
        assert current[1] == expected_start, (event["type"], current)
        assert current[3] is True  # elastic: minAvailable 1 < 2 pods


def test_bad_input_is_dead_lettered_and_valid_input_around_it_applies(pipeline: Pipeline) -> None:
    before_dead = pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters")
    good_before = ce.queue("dl-good-1", time=ce.at(0))
    good_after = ce.queue("dl-good-2", time=ce.at(0))
    cycle_a = ce.queue("dl-cyc-a", "dl-cyc-b")
    cycle_b = ce.queue("dl-cyc-b", "dl-cyc-a")
    missing_id = ce.queue("dl-noid")
    del missing_id["id"]
    unknown = ce.event("queue.renamed", "dl-x", {"name": "dl-x"}, ce.at(0))
    bad_duration = ce.queue("dl-bad", reclaim="1h-30m")
    negative = ce.queue("dl-neg", preempt="-5m")
    bad_config = ce.config(reclaimResolveMethod="median")
    pipeline.produce(
        "queues",
        [
            (b"dl-good-1", json.dumps(good_before).encode()),
            (b"dl-1", b"this is not json"),
            (b"dl-2", b"\xff\xfe binary"),
            (b"dl-3", json.dumps(missing_id).encode()),
            (b"dl-4", json.dumps(unknown).encode()),
            (b"dl-5", json.dumps(bad_duration).encode()),
            (b"dl-6", json.dumps(negative).encode()),
            (b"dl-cyc-a", json.dumps(cycle_a).encode()),
            (b"dl-cyc-b", json.dumps(cycle_b).encode()),
            (b"config/default", json.dumps(bad_config).encode()),
            (b"dl-good-2", json.dumps(good_after).encode()),
        ],
    )
    schema = ce.submitted("dl-pg", "leaf1", ["p0"], priority=50)
    schema["data"]["priority"] = "high"
    pipeline.produce_events("podgroups", [schema])

    expected = 9
    wait_for(
        lambda: (
            pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters")
            >= before_dead + expected
        ),
        what=f"{expected} dead letters\n{pipeline.log_tail()}",
    )
    kinds = [
        kind
        for (kind,) in pipeline.query(
            'SELECT kind FROM minruntime.dead_letters ORDER BY topic, partition, "offset"'
        )
    ][before_dead:]
    assert sorted(kinds) == sorted(
        [
            "not_json",
            "not_json",
            "not_cloudevent",
            "unknown_type",
            "bad_duration",
            "negative_duration",
            "queue_cycle",
            "invalid_config",
            "schema_violation",
        ]
    )
    messages = pipeline.query("SELECT kind, message FROM minruntime.dead_letters")
    assert all(message and "\n" not in message for _, message in messages)
    queues = {name for (name,) in pipeline.query("SELECT name FROM minruntime.queues")}
    assert {"dl-good-1", "dl-good-2", "dl-cyc-a"} <= queues  # the first link is valid
    assert not {"dl-bad", "dl-neg", "dl-noid"} & queues
    # The previous configuration stays in force (the design examples still resolve).
    assert pipeline.scalar(
        "SELECT resolved_from FROM minruntime.reclaim_protection('leaf1') WHERE uid = 'ex-leaf3'"
    ) in ("D", None)

    letters = pipeline.consume("dead_letter", before_dead + expected)
    assert len(letters) >= before_dead + expected
    bodies = [json.loads(m.value) for m in letters]
    assert {b["errorKind"] for b in bodies} >= set(kinds)
    ids = [dict(m.headers).get("id") for m in letters]
    assert all(ids)
    assert len(set(ids)) == len(ids)


def test_duplicate_event_ids_apply_once(pipeline: Pipeline) -> None:
    original = ce.queue("dup-q", reclaim="5m")
    again = dict(original, data={"name": "dup-q", "reclaimMinRuntime": "9m"})  # same id
    marker = ce.queue("dup-marker")
    pipeline.produce_events("queues", [original, again, marker])
    wait_for(
        lambda: pipeline.scalar("SELECT count(*) FROM minruntime.queues WHERE name = 'dup-marker'"),
        what="the marker",
    )
    assert (
        pipeline.scalar(
            "SELECT count(*) FROM minruntime.event_log WHERE id = %s", (original["id"],)
        )
        == 1
    )
    assert pipeline.scalar(
        "SELECT reclaim_min_runtime FROM minruntime.queues WHERE name = 'dup-q'"
    ) == timedelta(minutes=5)


def test_redelivered_records_are_recognised_and_skipped(pipeline: Pipeline) -> None:
    pipeline.produce_events("queues", [ce.queue("redeliver-before")])
    wait_for(
        lambda: pipeline.scalar(
            "SELECT count(*) FROM minruntime.queues WHERE name = 'redeliver-before'"
        ),
        what="the first marker",
    )
    pipeline.stop()
    applied = pipeline.scalar("SELECT count(*) FROM minruntime.event_log")
    digest = _digest(pipeline)
    # Rewind the processor's consumer group to the beginning of every input topic.
    asyncio.run(_rewind(pipeline))
    pipeline.start()
    pipeline.produce_events("queues", [ce.queue("redeliver-after")])
    wait_for(
        lambda: pipeline.scalar(
            "SELECT count(*) FROM minruntime.queues WHERE name = 'redeliver-after'"
        ),
        60,
        f"the second marker\n{pipeline.log_tail()}",
    )
    assert pipeline.scalar("SELECT count(*) FROM minruntime.event_log") == applied + 1
    assert _digest(pipeline, exclude_queue="redeliver-after") == digest


async def _rewind(pipeline: Pipeline) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    group = pipeline.env["MINRUNTIME_PROCESSOR_GROUP"]
    consumer = AIOKafkaConsumer(
        **pipeline.kafka.client_kwargs(), group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        offsets = {
            TopicPartition(spec.name, partition): 0
            for spec in topic_specs(pipeline.settings())
            if spec.role in INPUT_ROLES
            for partition in range(spec.partitions)
        }
        assert offsets, "no input partitions found"
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


def _digest(pipeline: Pipeline, exclude_queue: str = "") -> tuple:
    return (
        pipeline.query(
            "SELECT * FROM minruntime.queues WHERE name <> %s ORDER BY name", (exclude_queue,)
        ),
        pipeline.query(
            "SELECT uid, status, start_time, running_pods FROM minruntime.podgroups ORDER BY uid"
        ),
        pipeline.query("SELECT kind, message FROM minruntime.dead_letters ORDER BY message"),
    )


def _trace(count: int) -> tuple[list[dict], list[dict]]:
    """A deterministic cluster story: queues, then podgroups submitted/allocated/released."""
    queues = [ce.queue(f"crash-q{i}", "A" if i % 2 else None, reclaim=f"{i}m") for i in range(20)]
    podgroups = []
    for i in range(count):
        uid = f"crash-{i:05d}"
        podgroups += [
            ce.submitted(
                uid, f"crash-q{i % 20}", ["p0", "p1"], priority=50, min_available=1, time=ce.at(i)
            ),
            ce.allocated(uid, ["p0"], ce.at(i + 1)),
            ce.allocated(uid, ["p1"], ce.at(i + 2)),
        ]
        if i % 3 == 0:
            podgroups.append(ce.released(uid, time=ce.at(i + 3), reason="completed"))
    return queues, podgroups


def _final_state(pipeline: Pipeline) -> tuple:
    return (
        pipeline.query("SELECT * FROM minruntime.queues ORDER BY name"),
        pipeline.query(
            "SELECT uid, status, start_time, running_pods, is_elastic FROM minruntime.podgroups"
            " ORDER BY uid"
        ),
        pipeline.query(
            "SELECT id, type, subject, event_time FROM minruntime.event_log ORDER BY id"
        ),
    )


def test_kill_9_mid_stream_gives_the_same_state_as_no_crash(
    stack: StackStatus, settings: Settings, tmp_path: Path
) -> None:
    queues, podgroups = _trace(4000)
    total = len(queues) + len(podgroups)
    crashed = Pipeline(settings, tmp_path, "crash").create()
    clean = Pipeline(settings, tmp_path, "clean").create()
    try:
        for target in (crashed, clean):
            target.start()
            target.stop()  # topics exist; produce before consuming so the crash lands mid-stream
            target.produce_events("queues", queues)
            target.produce_events("podgroups", podgroups)

        crashed.start()
        wait_for(
            lambda: crashed.scalar("SELECT count(*) FROM minruntime.event_log") > 500,
            60,
            f"progress before the crash\n{crashed.log_tail()}",
        )
        assert crashed.kill() != 0
        in_flight = crashed.scalar("SELECT count(*) FROM minruntime.event_log")
        assert in_flight < total, "the crash came after the whole stream was applied"
        crashed.start()
        clean.start()
        for target in (crashed, clean):
            wait_for(
                lambda target=target: (
                    target.scalar("SELECT count(*) FROM minruntime.event_log") >= total
                ),
                120,
                f"all {total} events\n{target.log_tail()}",
            )
        assert crashed.scalar("SELECT count(*) FROM minruntime.event_log") == total
        assert _final_state(crashed) == _final_state(clean)
        assert crashed.scalar("SELECT count(*) FROM minruntime.dead_letters") == 0
    finally:
        crashed.drop()
        clean.drop()


def test_the_processor_group_has_one_member_per_processor(pipeline: Pipeline) -> None:
    # faust hosts the process with its own Kafka consumer off: only the batched consumer
    # joins the group (two members with one static instance id would fence each other).
    async def groups() -> tuple[list[str], list[str]]:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(**pipeline.kafka.client_kwargs())
        await start_client(admin, pipeline.kafka)
        try:
            (described,) = await admin.describe_consumer_groups([pipeline.group])
            listed = await admin.list_consumer_groups()
        finally:
            await admin.close()
        members = described.to_object()["groups"][0]["members"]
        return [member["member_id"] for member in members], [group for group, _ in listed]

    def one_member() -> bool:
        members, _ = asyncio.run(groups())
        return len(members) == 1

    wait_for(one_member, 30, f"one member in {pipeline.group}\n{pipeline.log_tail()}")
    _, listed = asyncio.run(groups())
    assert [group for group in listed if group.startswith(pipeline.group)] == [pipeline.group]
