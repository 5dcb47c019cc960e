"""`minruntime doctor`'s judgement of a topic's replication settings."""

from __future__ import annotations

import pytest

from minruntime.stream.topic_safety import Severity, judge_missing, judge_topic


def _severities(brokers: int, factor: int, **configs: str) -> list[Severity]:
    named = {key.replace("_", "."): value for key, value in configs.items()}
    return [f.severity for f in judge_topic("t", brokers, factor, named)]


def test_the_production_shape_is_ok() -> None:
    (finding,) = judge_topic("t", 3, 3, {"min.insync.replicas": "2"})
    assert finding.severity is Severity.OK
    assert finding.line() == "ok      t: 3 replicas, min.insync.replicas 2"


@pytest.mark.parametrize(
    ("brokers", "factor", "min_isr", "expected"),
    [
        (1, 1, "1", Severity.NOTE),  # the local stack: development only
        (3, 1, "1", Severity.UNSAFE),  # the only copy on one broker of three
        (3, 3, "1", Severity.UNSAFE),  # acknowledged by the leader alone
        (3, 3, "3", Severity.UNSAFE),  # one broker down stops the writes
        (5, 3, "2", Severity.OK),
    ],
)
def test_each_unsafe_shape_is_named(
    brokers: int, factor: int, min_isr: str, expected: Severity
) -> None:
    assert _severities(brokers, factor, min_insync_replicas=min_isr) == [expected]


def test_unclean_leader_election_is_unsafe_even_when_the_rest_is_right() -> None:
    found = judge_topic(
        "t", 3, 3, {"min.insync.replicas": "2", "unclean.leader.election.enable": "true"}
    )
    assert [f.severity for f in found] == [Severity.UNSAFE]
    assert "unclean" in found[0].message


def test_a_missing_topic_says_how_it_will_be_created() -> None:
    assert judge_missing("t", 3, 3).severity is Severity.NOTE
    assert judge_missing("t", 3, 1).severity is Severity.UNSAFE
    assert "replication factor 3" in judge_missing("t", 3, 3).message


def test_every_producer_of_the_service_is_idempotent_so_acks_all() -> None:
    """aiokafka's `enable_idempotence=True` forces `acks=all`: a write is acknowledged only
    once every in-sync replica has it (docs/deployment.md, Kafka with several brokers)."""
    import ast
    from pathlib import Path

    import minruntime

    package = Path(minruntime.__file__).parent
    made = 0
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "AIOKafkaProducer"
            ):
                made += 1
                flags = {k.arg: k.value for k in node.keywords if k.arg}
                value = flags.get("enable_idempotence")
                assert isinstance(value, ast.Constant), f"{path}:{node.lineno}"
                assert value.value is True, f"{path}:{node.lineno}"
                assert "acks" not in flags, f"{path}:{node.lineno}"
    assert made >= 4  # produce, the outbox relay (both processes), the bridge, stack checks
