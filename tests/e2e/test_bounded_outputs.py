"""Bounded outputs and a worker that survives any state (issue 12, findings 2 and 3), for real.

One pipeline (database, topics, processor) and one requeue worker serve the module, like the
service runs: a big dead letter, an outbox row the broker refuses, and a hostile node must
each leave the rest of the output flowing — decisions committed in SQL reach
``kai.requeue-decisions``, dead letters reach ``kai.dead-letter`` — and nobody crash-loops.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import uuid
from typing import Any

import pytest

from minruntime.events import decode_dead_letter
from minruntime.events.dead_letter import DEAD_LETTER_MAX_BYTES
from tests.conftest import MINRUNTIME, ROOT
from tests.e2e.harness import Pipeline, wait_for
from tests.e2e.test_requeue_worker import (
    OVERRUN,
    RequeueStack,
    Scene,
    committed_for,
    decision_ids,
    decisions,
    read_topic,
    requeue_stack_fixture,
    scrape,
    wait_decisions,
    wait_published,
)

pytestmark = pytest.mark.stack

MIB = 1024 * 1024
EXCLUDED_NODES = ("kai_requeue_excluded_total", {"what": "node", "reason": "invalid_gpu"})


rq = requeue_stack_fixture("bo")


def commits_for_a_contender(rq: RequeueStack, name: str) -> str:
    """A healthy scene (an over-running victim, a contender that needs it); its commit's id."""
    scene = Scene(rq.pipeline, name)
    scene.prepare({"n1": 8})
    hi = scene.pend(scene.job("hi", 4, priority=100, min_available=4))
    victim = scene.start(scene.job("v", 8, priority=50, annotations=OVERRUN), "n1")
    assert wait_decisions(rq.pipeline, victim) == [committed_for(hi)], rq.worker.log_tail()
    [decision_id] = decision_ids(rq.pipeline, victim)
    return decision_id


def dead_letters(pipeline: Pipeline) -> list[Any]:
    return read_topic(pipeline, "dead_letter")


def insert_outbox(pipeline: Pipeline, topic: str, key: bytes, payload: bytes) -> str:
    """An outbox row written as the service writes them (the relays are woken by polling)."""
    row_id = str(uuid.uuid4())
    with pipeline.connect() as conn:
        conn.execute(
            "INSERT INTO minruntime_state.outbox (id, topic, key, payload, headers)"
            " VALUES (%s, %s, %s, %s, '{}'::jsonb)",
            (row_id, topic, key, payload),
        )
    return row_id


def test_an_800kb_binary_record_is_dead_lettered_bounded_and_decisions_keep_flowing(
    rq: RequeueStack,
) -> None:
    pipeline = rq.pipeline
    value = b"\xff" + os.urandom(800_000)
    # Finding 3: this became a ~1 MB base64 dead letter the broker refused, and both relays
    # retried that oldest batch forever.
    pipeline.produce("podgroups", [(b"big", value)])

    letters = wait_for(
        lambda: [r for r in dead_letters(pipeline) if r.key == b"big"],
        60,
        f"the big record's dead letter\n{pipeline.log_tail()}",
    )
    [letter] = letters
    read = decode_dead_letter(letter.value)
    assert len(letter.value) <= DEAD_LETTER_MAX_BYTES
    assert read.value_truncated is True
    assert (read.value_size, read.value_sha256) == (len(value), hashlib.sha256(value).hexdigest())
    # The original is kept in the database, where the record's coordinates find it.
    [(stored,)] = pipeline.query(
        "SELECT value FROM minruntime.dead_letters"
        ' WHERE topic = %s AND partition = %s AND "offset" = %s',
        (read.topic, read.partition, read.offset),
    )
    assert bytes(stored) == value

    decision_id = commits_for_a_contender(rq, "big-dl")
    assert wait_published(pipeline, decision_id).event["type"] == "requeue.committed"
    assert pipeline.scalar("SELECT count(*) FROM minruntime.outbox_set_aside") == 0


def test_a_row_the_broker_refuses_is_set_aside_and_the_rows_after_it_are_published(
    rq: RequeueStack,
) -> None:
    pipeline = rq.pipeline
    topic = pipeline.topics["requeue_decisions"]
    refused = insert_outbox(pipeline, topic, b"huge", b"x" * (2 * MIB))
    after = [
        insert_outbox(pipeline, topic, b"small", json.dumps({"n": n}).encode()) for n in range(3)
    ]

    def published_ids() -> set[str]:
        return {
            value.decode()
            for record in read_topic(pipeline)
            for key, value in record.headers
            if key == "id"
        }

    wait_for(
        lambda: set(after) <= published_ids(),
        60,
        f"the rows after the refused one on the topic\n{pipeline.log_tail()}",
    )
    wait_for(
        lambda: pipeline.scalar("SELECT count(*) FROM minruntime.outbox_set_aside"),
        60,
        "the refused row to be set aside",
    )
    [(row_id, size, failure, attempts)] = pipeline.query(
        "SELECT id::text, payload_bytes, failure, attempts FROM minruntime.outbox_set_aside"
    )
    assert (row_id, size, attempts) == (refused, 2 * MIB, 1)
    assert failure.startswith("MessageSizeTooLargeError")
    assert refused not in published_ids()
    # Counted once, by whichever relay met it; the backlog gauge no longer counts it.
    set_aside = [
        scrape(port).get(("minruntime_outbox_set_aside_total", {"reason": "too_large"}))
        for port in (rq.worker_port, rq.processor_port)
    ]
    assert sum(set_aside) == 1
    wait_for(
        lambda: scrape(rq.processor_port).get(("minruntime_outbox_set_aside_rows", {})) == 1,
        30,
        "the set-aside gauge",
    )

    # The operator's view and retry: the row is tried again, and refused again.
    env = {**os.environ, **pipeline.env}
    listed = subprocess.run(
        [MINRUNTIME, "outbox", "list"], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert listed.returncode == 0, listed.stderr
    assert refused in listed.stdout
    retried = subprocess.run(
        [MINRUNTIME, "outbox", "retry", refused], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert (retried.returncode, retried.stdout.strip()) == (
        0,
        "1 outbox row(s) put back in the queue",
    ), retried.stderr
    wait_for(
        lambda: (
            pipeline.scalar(
                "SELECT attempts FROM minruntime.outbox_set_aside WHERE id = %s", (refused,)
            )
            == 2
        ),
        60,
        "the retried row to be refused and set aside again",
    )


def test_a_hostile_node_in_the_projection_does_not_stop_the_worker(rq: RequeueStack) -> None:
    pipeline = rq.pipeline
    # Finding 2: `node.upserted` with gpu 1e308 killed the active worker in gpu_units, then
    # the standby, forever. Written straight into the projection, as an older version or a
    # restore could have left it (ingest may refuse the event itself).
    with pipeline.connect() as conn:
        conn.execute(
            "INSERT INTO minruntime_state.node_state (name, node_pool, gpu)"
            " VALUES ('hostile', 'default', 1e308), ('not-a-number', 'default', 'NaN')"
        )
    try:
        before = rq.metrics().get(EXCLUDED_NODES)

        decision_id = commits_for_a_contender(rq, "hostile")

        assert wait_published(pipeline, decision_id).event["type"] == "requeue.committed"
        rq.check_worker()
        assert rq.metrics().get(EXCLUDED_NODES) >= before + 2
        assert decisions(pipeline, "hostile-v")[0][0] == "committed"
    finally:
        # The log never had them: `replay --verify` at the end must find the state it implies.
        with pipeline.connect() as conn:
            conn.execute(
                "DELETE FROM minruntime_state.node_state WHERE name IN ('hostile', 'not-a-number')"
            )
