"""`stack up --brokers 3 --pg-standby`: a real three-broker KRaft cluster and a PostgreSQL with
a synchronous standby, each taken through a fault with the stack's own commands.

Kafka: the service's topics get three replicas and two in sync; with the leader of a
partition killed (`stack kill-broker`), writes with acks=all are still acknowledged and none is
lost; `stack start-broker` brings it back into the in-sync set. PostgreSQL: a commit waits
while the synchronous standby is away; `stack failover` promotes the standby, the stack's
URLs keep working, and the fenced old primary, started again, refuses writes; `stack up`
re-clones it as the new primary's standby.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from minruntime.kafka_access import KafkaAccess, kafka_access
from minruntime.settings import OWNER_ROLE, with_role
from minruntime.topic_admin import ensure_topics, topic_specs
from minruntime_dev.stack.pg_standby import APPLICATION_NAME
from minruntime_dev.topology import read_stack_env
from tests.conftest import run_cli
from tests.e2e.faults.conftest import FaultStack
from tests.e2e.harness import create_topic, wait_for

pytestmark = pytest.mark.stack


def _lines(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines() if "=" in line)


def test_status_lists_every_node_and_the_urls_name_both_servers(fault_stack: FaultStack) -> None:
    status = run_cli("stack", "status", env=fault_stack.env)
    assert status.returncode == 0, status.stdout + status.stderr
    rows = {line.split()[1]: line for line in status.stdout.splitlines() if line.startswith("│")}
    for name in ("postgresql", "postgresql-2", "kafka-1", "kafka-2", "kafka-3"):
        assert "│ healthy" in rows[name], status.stdout
    pair = fault_stack.postgres()  # a failover (a test of it, earlier) swaps the two
    assert "primary, standby streaming (sync)" in rows[pair.name_of(pair.primary)]
    assert "standby, streaming from port" in rows[pair.name_of(pair.standby)]
    lines = _lines(status.stdout)
    first = int(fault_stack.env["MINRUNTIME_KAFKA_BOOTSTRAP"].rsplit(":", 1)[1])
    brokers = ",".join(f"127.0.0.1:{first + step}" for step in (0, 10, 20))
    assert lines["KAFKA_BOOTSTRAP"] == brokers
    port = fault_stack.base.database_parts.port
    servers = f"@127.0.0.1:{port},127.0.0.1:{port + 1}/minruntime?"
    for name in ("DATABASE_URL", "OWNER_DATABASE_URL"):
        assert servers in lines[name]
        assert "target_session_attrs=read-write" in lines[name]
    assert "target_session_attrs=prefer-standby" in lines["READER_DATABASE_URL"]
    # The addresses the stack exports for its clients (the settings read no file of the stack's).
    assert read_stack_env(fault_stack.base.stack_dir) == {
        "MINRUNTIME_KAFKA_BOOTSTRAP": lines["KAFKA_BOOTSTRAP"],
        "MINRUNTIME_DATABASE_URL": lines["DATABASE_URL"],
    }
    with psycopg.connect(lines["READER_DATABASE_URL"]) as conn:
        assert conn.execute("SELECT pg_is_in_recovery(), inet_server_port()").fetchone() == (
            True,
            pair.standby.port,
        )


async def _replication(access: KafkaAccess, names: list[str]) -> dict[str, tuple[set[int], str]]:
    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await admin.start()
    try:
        # A broker learns of a topic another one just created a moment later: until then it
        # describes it without partitions (seen in CI). Ask again, within a bound.
        deadline = time.monotonic() + 30
        while True:
            described = await admin.describe_topics(names)
            if all(t["partitions"] for t in described) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        (answer,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
    finally:
        await admin.close()
    factors = {t["topic"]: {len(p["replicas"]) for p in t["partitions"]} for t in described}
    min_isr = {
        resource[3]: next(e[1] for e in resource[4] if e[0] == "min.insync.replicas")
        for resource in answer.resources
    }
    return {name: (factors[name], min_isr[name]) for name in names}


def test_the_services_topics_get_three_replicas_two_in_sync(fault_stack: FaultStack) -> None:
    settings = fault_stack.settings
    access = kafka_access(settings)
    specs = topic_specs(settings)
    asyncio.run(ensure_topics(access, specs))  # the cluster's defaults: none set per topic
    found = asyncio.run(_replication(access, [spec.name for spec in specs]))
    assert found == {spec.name: ({3}, "2") for spec in specs}


async def _produce(access: KafkaAccess, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(
        **access.client_kwargs(), acks="all", enable_idempotence=True, request_timeout_ms=60_000
    )
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"k")
    finally:
        await producer.stop()


async def _consume(access: KafkaAccess, topic: str, count: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic,
        **access.client_kwargs(),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await consumer.start()
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=2000)).values():
                got.extend(record.value for record in records if record.value is not None)
    finally:
        await consumer.stop()
    return got


def test_with_the_leader_killed_acks_all_writes_are_acknowledged_and_kept(
    fault_stack: FaultStack,
) -> None:
    access = kafka_access(fault_stack.settings)
    cluster = fault_stack.cluster
    topic = f"test.faults-{uuid.uuid4().hex[:8]}"
    asyncio.run(create_topic(access, topic, replicas=3))
    before = [f"before-{i}".encode() for i in range(20)]
    asyncio.run(_produce(access, topic, before))
    leader = wait_for(lambda: max(cluster.leader_of(topic, 0), 0), 30, "a leader")

    killed = run_cli("stack", "kill-broker", str(leader), env=fault_stack.env)
    assert killed.returncode == 0, killed.stderr
    assert f"sent SIGKILL to Kafka broker {leader}" in killed.stdout
    after = [f"after-{i}".encode() for i in range(20)]
    began = time.monotonic()
    asyncio.run(_produce(access, topic, after))  # acks=all: two in sync of three suffice
    moved = cluster.partition_state(topic, 0)
    assert moved.leader not in (leader, -1)
    assert leader not in moved.isr, moved
    assert len(moved.isr) == 2, moved
    assert time.monotonic() - began < 60

    started = run_cli("stack", "start-broker", str(leader), env=fault_stack.env)
    assert started.returncode == 0, started.stderr
    assert f"Kafka broker {leader} started" in started.stdout
    wait_for(
        lambda: len(cluster.partition_state(topic, 0).isr) == 3, 60, f"broker {leader} in sync"
    )
    assert asyncio.run(_consume(access, topic, 40)) == before + after  # none lost, none twice


def test_a_commit_waits_while_the_synchronous_standby_is_away(fault_stack: FaultStack) -> None:
    pair = fault_stack.postgres()
    owner = with_role(pair.primary.url, OWNER_ROLE, fault_stack.base.passfile)
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.fault_probe (n int)")
    pair.standby.stop()
    done = threading.Event()

    def commit() -> None:
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute("INSERT INTO public.fault_probe VALUES (1)")
        done.set()

    writer = threading.Thread(target=commit, daemon=True)
    writer.start()
    try:
        assert not done.wait(3), "a commit was acknowledged with the synchronous standby away"
    finally:
        fault_stack.heal()  # the standby back: the waiting commit completes
    assert done.wait(30)
    writer.join(5)
    with pair.primary.admin_connection() as conn:
        row = conn.execute(
            "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
            (APPLICATION_NAME,),
        ).fetchone()
    assert row == ("sync",)


def test_failover_keeps_the_urls_working_and_fences_the_old_primary(
    fault_stack: FaultStack,
) -> None:
    url = _lines(run_cli("stack", "status", env=fault_stack.env).stdout)["OWNER_DATABASE_URL"]
    before = fault_stack.postgres()
    port, standby_port = before.primary.port, before.standby.port
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS public.failover_probe")
        conn.execute("CREATE TABLE public.failover_probe (n int)")
        conn.execute("INSERT INTO public.failover_probe VALUES (1)")
        assert conn.execute("SELECT inet_server_port()").fetchone() == (port,)

    failover = run_cli("stack", "failover", env=fault_stack.env)
    assert failover.returncode == 0, failover.stderr
    assert f"on port {standby_port} promoted" in failover.stdout
    assert _lines(failover.stdout)["OWNER_DATABASE_URL"] == url  # the same URL, both servers
    with psycopg.connect(url, autocommit=True) as conn:  # libpq finds the read-write one
        conn.execute("INSERT INTO public.failover_probe VALUES (2)")
        assert conn.execute("SELECT inet_server_port()").fetchone() == (standby_port,)
        rows = conn.execute("SELECT n FROM public.failover_probe ORDER BY n").fetchall()
    assert rows == [(1,), (2,)]  # the acknowledged commit before the failover is there

    old = fault_stack.postgres().standby
    assert old.port == port
    assert not old.is_running()
    fenced = run_cli("stack", "status", env=fault_stack.env)
    assert fenced.returncode == 3  # one server fenced: not healthy until `stack up`
    assert "fenced former primary, stopped" in fenced.stdout

    old.start(fault_stack.base.stack_timeout_seconds)  # as anything might start it again
    with psycopg.connect(with_role(old.url, OWNER_ROLE, fault_stack.base.passfile)) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("INSERT INTO public.failover_probe VALUES (3)")

    rejoined = run_cli("stack", "up", env=fault_stack.env)
    assert rejoined.returncode == 0, rejoined.stderr
    assert f"on port {port} cloned from port {standby_port}" in rejoined.stdout
    status = fault_stack.status()
    assert status.healthy, status
    after = fault_stack.postgres()
    assert (after.primary.port, after.standby.port) == (standby_port, port)
    details = {c.name: c.detail for c in status.components}
    assert details[after.name_of(after.standby)].startswith(
        f"standby, streaming from port {standby_port}"
    )
    assert details[after.name_of(after.primary)].startswith("primary, standby streaming (sync)")
