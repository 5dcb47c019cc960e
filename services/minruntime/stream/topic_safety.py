"""Is a Kafka cluster set up so that an acknowledged event cannot be lost? The judgement, pure.

The service writes every topic with `acks=all` and an idempotent producer: a write is
acknowledged once every replica in the partition's in-sync set has it. How many that is depends
on the cluster, not on the service:

- `replication.factor` 1: the only copy lives on one broker; losing that disk loses the topic.
- `min.insync.replicas` 1 with more replicas: the in-sync set may shrink to the leader alone,
  and a write acknowledged then exists once; if that broker dies it is gone.
- `min.insync.replicas` equal to the replication factor: nothing is lost, but one broker down
  stops every write to the topic (the outbox relays and producers wait).
- `unclean.leader.election.enable=true`: a replica that missed acknowledged writes may become
  leader, and those writes are gone.

`minruntime doctor` reads the configs and prints these findings one line each (docs/deployment.md,
"Kafka with several brokers").
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import NamedTuple


class Severity(StrEnum):
    """How much a finding matters."""

    OK = "ok"
    NOTE = "note"  # works; worth knowing (a single-broker development cluster)
    UNSAFE = "unsafe"  # an acknowledged event can be lost, or writes stop


class Finding(NamedTuple):
    """One line of the doctor's answer."""

    severity: Severity
    subject: str
    message: str

    def line(self) -> str:
        """`unsafe  kai.podgroups: ...`"""
        return f"{self.severity.value:<6}  {self.subject}: {self.message}"


def judge_topic(
    name: str, brokers: int, replication_factor: int, configs: Mapping[str, str]
) -> list[Finding]:
    """The findings for one topic of a cluster with ``brokers`` brokers (``configs``: the
    topic's effective configs, its own or inherited from the broker)."""
    min_isr = int(configs.get("min.insync.replicas", "1"))
    unclean = configs.get("unclean.leader.election.enable", "false").lower() == "true"
    found: list[Finding] = []

    def add(severity: Severity, message: str) -> None:
        found.append(Finding(severity, name, message))

    if replication_factor == 1:
        add(
            Severity.UNSAFE if brokers > 1 else Severity.NOTE,
            "replication factor 1 on a single-broker cluster (development only)"
            if brokers == 1
            else "replication factor 1: one broker's disk holds the only copy",
        )
    elif min_isr < 2:
        add(
            Severity.UNSAFE,
            f"min.insync.replicas {min_isr} with {replication_factor} replicas: a write "
            "acknowledged by the leader alone is lost with that broker (set it to 2)",
        )
    elif min_isr >= replication_factor:
        add(
            Severity.UNSAFE,
            f"min.insync.replicas {min_isr} = replication factor {replication_factor}: "
            "one broker down stops every write (relays and producers wait)",
        )
    if unclean:
        add(
            Severity.UNSAFE,
            "unclean.leader.election.enable=true: a replica missing acknowledged writes "
            "may become leader",
        )
    if not found:
        add(Severity.OK, f"{replication_factor} replicas, min.insync.replicas {min_isr}")
    return found


def judge_missing(name: str, brokers: int, replication_factor: int) -> Finding:
    """A topic the service will create when it first starts."""
    severity = Severity.NOTE if replication_factor > 1 or brokers == 1 else Severity.UNSAFE
    return Finding(
        severity,
        name,
        f"missing; the service creates it with replication factor {replication_factor}",
    )
