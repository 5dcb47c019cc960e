"""`minruntime doctor`: is the Kafka cluster and the PostgreSQL server behind the settings set up
so that nothing acknowledged can be lost? One line per finding; exit 1 when one is unsafe.

Kafka: each topic the service uses (its replication factor, `min.insync.replicas`, unclean
leader election: minruntime.stream.topic_safety). PostgreSQL: which server the runtime URL
reaches, whether that is a primary, whether a URL naming several hosts asks for the read-write
one, and whether commits wait for a standby (docs/deployment.md, "PostgreSQL with a standby").
"""

from __future__ import annotations

import asyncio
import json

import typer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from minruntime.cluster.ledger import ledger_spec
from minruntime.commands.common import Json, current_settings, units
from minruntime.kafka_access import kafka_access, start_client
from minruntime.pgurl import PgAddress
from minruntime.settings import Settings
from minruntime.stream.topic_safety import Finding, Severity, judge_missing, judge_topic
from minruntime.topic_admin import ClusterFacts, topic_specs


def doctor_command(as_json: Json = False) -> None:
    """Check the Kafka topics and the database for settings that can lose acknowledged data."""
    settings = current_settings()
    findings = asyncio.run(kafka_findings(settings)) + database_findings(settings)
    if as_json:
        print(json.dumps([f._asdict() for f in findings], indent=2))
    else:
        for finding in findings:
            print(finding.line())
    if any(f.severity is Severity.UNSAFE for f in findings):
        raise typer.Exit(1)


async def kafka_findings(settings: Settings) -> list[Finding]:
    """The findings for every topic the service creates or writes."""
    access = kafka_access(settings)
    specs = [*topic_specs(settings), ledger_spec(settings)]
    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await start_client(admin, access)
    try:
        cluster = await ClusterFacts.read(admin, need_default=True)
        existing = set(await admin.list_topics())
        present = [spec.name for spec in specs if spec.name in existing]
        replicas: dict[str, int] = {}
        configs: dict[str, dict[str, str]] = {}
        if present:
            for topic in await admin.describe_topics(present):
                partitions = topic.get("partitions") or [{}]
                replicas[topic["topic"]] = min(len(p.get("replicas", ())) for p in partitions)
            answers = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name) for name in present]
            )
            for answer in answers:
                for resource in answer.to_object()["resources"]:
                    configs[resource["resource_name"]] = {
                        entry["config_names"]: entry["config_value"]
                        for entry in resource["config_entries"]
                    }
    finally:
        await admin.close()
    findings = [
        Finding(
            Severity.OK,
            "kafka",
            f"{cluster.brokers} broker(s), default.replication.factor "
            f"{cluster.default_replication_factor}",
        )
    ]
    for spec in specs:
        if spec.name in existing:
            findings += judge_topic(
                spec.name, cluster.brokers, replicas[spec.name], configs.get(spec.name, {})
            )
        else:
            factor = spec.replication.factor or cluster.default_replication_factor
            findings.append(judge_missing(spec.name, cluster.brokers, factor))
    return findings


def database_findings(settings: Settings) -> list[Finding]:
    """Which server the runtime URL reaches, and how its commits survive a failover."""
    address = PgAddress.parse(settings.database_url)
    findings: list[Finding] = []
    if len(address.servers) > 1 and address.params.get("target_session_attrs") not in (
        "read-write",
        "primary",
    ):
        findings.append(
            Finding(
                Severity.UNSAFE,
                "postgresql",
                f"the runtime URL names {len(address.servers)} hosts without "
                "target_session_attrs=read-write: it may reach a read-only standby",
            )
        )
    timeout = {"connect_timeout": 10}
    with units(settings.database_url, connect_args=timeout) as made, made.connected() as unit:
        server, (standby, commit, names, replicas) = unit.server()
    if standby:
        findings.append(
            Finding(Severity.UNSAFE, "postgresql", f"the runtime URL reached {server}, a standby")
        )
        return findings
    if names and commit in ("on", "remote_write", "remote_apply"):
        findings.append(
            Finding(
                Severity.OK,
                "postgresql",
                f"{server}: a primary; commits wait for a standby ({names}, "
                f"synchronous_commit={commit})",
            )
        )
    elif replicas:
        findings.append(
            Finding(
                Severity.NOTE,
                "postgresql",
                f"{server}: a primary with {replicas} asynchronous standby(s): a failover may "
                "lose the last acknowledged commits (synchronous_standby_names is empty)",
            )
        )
    else:
        findings.append(
            Finding(Severity.NOTE, "postgresql", f"{server}: a primary without a standby")
        )
    return findings
