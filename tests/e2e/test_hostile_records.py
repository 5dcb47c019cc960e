"""The hostile-record corpus of issue 12 against a real `minruntime processor`.

Every payload of findings 1, 2, 4 and 5, each followed by valid records: the processor keeps
running (never restarted), every bad record becomes exactly one dead letter of the right kind,
every valid record is applied exactly once, and `replay --verify` is equal (Pipeline.drop
checks it at teardown). On the code before issue 12 the processor crash-looped (exit 75 after
~22 s of retries on an index row too large, exit 70 on RecursionError), or let NaN / year-0
timestamps through to break jsonb and the audit commands.

Also: values an older version already stored (a year-0 start time) make `protection`,
`explain` and `replay --verify` answer with one line, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minruntime.ingest import InboundRecord, apply_batch
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime_dev.stack import StackStatus
from tests import cloudevents as ce
from tests.conftest import run_cli
from tests.e2e.harness import Pipeline, wait_for
from tests.integration.helpers import HUGE_INDEX

pytestmark = pytest.mark.stack


class Corpus:
    """Bad records (with the kind each must be dead-lettered as) interleaved with valid ones."""

    def __init__(self) -> None:
        self.records: dict[str, list[tuple[bytes, bytes]]] = {"queues": [], "podgroups": []}
        self.records["nodes"] = []
        self.bad: list[tuple[str, bytes, str]] = []  # (role, value, kind)
        self.valid = 0
        self.valid_subjects: list[str] = []

    def add_bad(self, role: str, key: str, value: bytes, kind: str) -> None:
        self.records[role].append((key.encode()[:200], value))
        self.bad.append((role, value, kind))
        self.add_valid(role)

    def add_valid(self, role: str, document: dict[str, Any] | None = None) -> None:
        n = self.valid
        if document is None:
            document = {
                "queues": lambda: ce.queue(f"ok-q{n}"),
                "podgroups": lambda: ce.submitted(f"ok-pg{n}", "ok-q0", ["p0"], priority=50),
                "nodes": lambda: ce.event("node.upserted", f"ok-n{n}", _node(f"ok-n{n}"), ce.at(0)),
            }[role]()
        self.records[role].append((str(document["subject"]).encode(), ce.wire(document)))
        self.valid += 1
        self.valid_subjects.append(str(document["subject"]))


def _node(name: str, gpu: float = 8) -> dict[str, Any]:
    return {"name": name, "gpu": gpu}


def hostile_corpus() -> Corpus:
    corpus = Corpus()
    corpus.add_valid("queues", ce.queue("ok-q0"))
    # Finding 1: identifiers too long for PostgreSQL's index rows.
    corpus.add_bad("queues", "long-queue", ce.wire(ce.queue(ce.LONG)), "too_long")
    corpus.add_bad(
        "podgroups",
        "long-uid",
        ce.wire(ce.submitted(ce.LONG, "ok-q0", ["p0"], priority=50)),
        "too_long",
    )
    long_node = ce.event("node.upserted", ce.LONG, _node(ce.LONG), ce.at(0))
    corpus.add_bad("nodes", "long-node", ce.wire(long_node), "too_long")
    corpus.add_bad("queues", "long-id", ce.wire(ce.queue("q-id", id=ce.LONG)), "too_long")
    corpus.add_bad(
        "queues", "long-src", ce.wire({**ce.queue("q-src"), "source": ce.LONG}), "too_long"
    )
    # Finding 1: JSON nested 10,000 deep (RecursionError, exit 70, on every restart).
    corpus.add_bad("queues", "deep", b"[" * 10_000, "too_deep")
    corpus.add_bad("podgroups", "deep", b"[" * 10_000 + b"]" * 10_000, "too_deep")
    # Finding 1: an extension attribute NaN / Infinity (accepted, then refused by jsonb).
    corpus.add_bad("queues", "q-nan", ce.with_extension(ce.queue("q-nan"), "NaN"), "not_finite")
    corpus.add_bad(
        "queues", "q-inf", ce.with_extension(ce.queue("q-inf"), "Infinity"), "not_finite"
    )
    minus = ce.with_extension(ce.queue("q-minf"), "-Infinity")
    corpus.add_bad("queues", "q-minf", minus, "not_finite")
    # Finding 2: a node's gpu 1e308 (killed the requeue worker in gpu_units).
    huge_gpu = ce.event("node.upserted", "n-huge-gpu", _node("n-huge-gpu", 1e308), ce.at(0))
    corpus.add_bad("nodes", "n-huge-gpu", ce.wire(huge_gpu), "out_of_range")
    # Finding 4: valid-looking timestamps outside years 1..9999 once in UTC.
    corpus.add_valid("podgroups", ce.submitted("pg-time", "ok-q0", ["p0"], priority=50))
    for text in ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
        corpus.add_bad(
            "podgroups", "pg-time", ce.wire(ce.allocated("pg-time", ["p0"], text)), "out_of_range"
        )
    # Finding 5: the same (source, id) with other content.
    original = ce.queue("q-dup", preempt="1m")
    corpus.add_valid("queues", original)
    changed = {**ce.queue("q-dup", preempt="2h"), "id": original["id"]}
    corpus.add_bad("queues", "q-dup", ce.wire(changed), "conflicting_duplicate")
    # The same event sent again with other whitespace: a true duplicate, silently skipped.
    corpus.records["queues"].append((b"q-dup", json.dumps(original, indent=1).encode()))
    # A value PostgreSQL itself refuses (index row too large): isolated from its batch.
    huge = ce.event("node.upserted", "huge-1", _node("huge-1"), ce.at(0))
    corpus.add_bad("nodes", "huge-1", ce.wire(huge), "unstorable")
    return corpus


@pytest.fixture(scope="module")
def pipeline(
    stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    running = Pipeline(settings, tmp_path_factory.mktemp("hostile"), "hostile").create()
    with running.connect_as_owner() as conn:
        conn.execute("; ".join(HUGE_INDEX))  # type: ignore[arg-type]
    running.start()
    try:
        yield running
    finally:
        running.drop()


def test_no_hostile_record_stops_the_processor(pipeline: Pipeline) -> None:
    corpus = hostile_corpus()
    for role in ("queues", "nodes", "podgroups"):
        pipeline.produce(role, corpus.records[role])

    def settled() -> bool:
        pipeline.check_alive()  # fails at once with the log when the processor died
        applied = pipeline.scalar("SELECT count(*) FROM minruntime.event_log")
        letters = pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters")
        return bool(applied >= corpus.valid and letters >= len(corpus.bad))

    wait_for(settled, 180, f"every record applied or dead-lettered\n{pipeline.log_tail()}")
    # Let anything still in flight land before counting exactly.
    wait_for(
        lambda: (
            pipeline.scalar(
                "SELECT coalesce(sum(next_offset), 0) FROM minruntime_state.consumer_offsets"
            )
            >= sum(len(records) for records in corpus.records.values())
        ),
        60,
        "every offset stored",
    )
    pipeline.check_alive()
    assert pipeline.process is not None
    assert pipeline.process.poll() is None  # the same process all along: no restart
    assert "stopping the processor" not in pipeline.log_tail(10_000)

    letters = pipeline.query("SELECT value, kind, message FROM minruntime.dead_letters")
    assert len(letters) == len(corpus.bad)
    for role, value, kind in corpus.bad:
        matching = [(k, m) for v, k, m in letters if bytes(v) == value]
        assert len(matching) == 1, (role, kind, value[:80])
        assert matching[0][0] == kind, (role, value[:80], matching[0])
    subjects = [s for (s,) in pipeline.query("SELECT subject FROM minruntime.event_log")]
    assert sorted(subjects) == sorted(corpus.valid_subjects)  # each valid one, once
    assert (
        pipeline.scalar(
            "SELECT preempt_min_runtime FROM minruntime.queues WHERE name = 'q-dup'"
        ).total_seconds()
        == 60
    )
    assert pipeline.scalar("SELECT count(*) FROM minruntime.nodes WHERE name LIKE 'huge-%'") == 0


@pytest.fixture
def legacy(stack: StackStatus, settings: Settings, tmp_path: Path) -> Iterator[Pipeline]:
    """A database as an older version left it: an allocation stored in year 0 (UTC)."""
    older = Pipeline(settings, tmp_path, "legacy").create()
    engine = engine_from(older.database_url)
    values = [
        ce.wire(ce.queue("leaf")),
        ce.wire(ce.submitted("old-pg", "leaf", ["p0"], priority=50)),
        ce.wire(ce.allocated("old-pg", ["p0"], ce.at(10))),
    ]
    topic = older.topics["queues"]
    records = [InboundRecord(topic, 0, i, b"k", v, None) for i, v in enumerate(values[:1])]
    pg_topic = older.topics["podgroups"]
    records += [InboundRecord(pg_topic, 0, i, b"old-pg", v, None) for i, v in enumerate(values[1:])]
    roles = {older.topics[role]: role for role in ("queues", "podgroups", "nodes", "nominations")}
    with engine.begin() as conn:
        apply_batch(conn, records, consumer_group=older.group, topic_roles=roles)
    engine.dispose()
    year_zero = "0001-01-01T00:00:00+01:00"
    with older.connect() as conn:
        conn.execute(
            "UPDATE minruntime_state.podgroup_state SET start_time = %s, last_start_time = %s",
            (year_zero, year_zero),
        )
        conn.execute(
            "UPDATE minruntime_state.event_log SET event_time = %s,"
            " payload = jsonb_set(payload, '{time}', to_jsonb(%s::text))"
            " WHERE type = 'podgroup.allocated'",
            (year_zero, year_zero),
        )
    try:
        yield older
    finally:
        older.drop(verify=False)


@pytest.mark.parametrize("args", [("protection",), ("explain", "old-pg"), ("replay", "--verify")])
def test_a_stored_year_zero_timestamp_never_prints_a_traceback(
    legacy: Pipeline, args: tuple[str, ...]
) -> None:
    # Finding 4: these exited with a Python traceback ("timestamp too small").
    result = run_cli(*args, env=legacy.env, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout
    if result.returncode != 0:
        # One error line (replay's progress bar may precede it on stderr).
        lines = result.stderr.strip().splitlines()
        assert lines[-1].startswith("minruntime: error: "), result.stderr
        assert sum(line.startswith("minruntime:") for line in lines) == 1, result.stderr
