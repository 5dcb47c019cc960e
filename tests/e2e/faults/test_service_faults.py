"""The service under faults of its engines: a three-broker Kafka and a PostgreSQL primary with a
synchronous standby (`fault_stack`), a processor and a requeue worker, ~1,000 events/s.

Each test breaks one thing while the load runs, and then proves: every acknowledged event is
applied once (the event log holds each id once, as many as the cluster acknowledged), every
committed decision is published once, and (at the end of the module) `replay --verify` equals
the live state. Each prints its recovery time; docs/guarantees.md has the table.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from minruntime.pgurl import PgAddress
from minruntime.settings import OWNER_ROLE, READER_ROLE
from tests.conftest import run_cli
from tests.e2e.faults.conftest import FaultStack
from tests.e2e.faults.load import Load, applied, timed
from tests.e2e.harness import Pipeline, wait_for
from tests.e2e.test_requeue_worker import Scene, decision_ids, published, wait_decisions

pytestmark = pytest.mark.stack

OVERRUN = {"kai.scheduler/expected-runtime": "1h"}


@pytest.fixture(scope="module")
def service(
    fault_stack: FaultStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    """A processor and a requeue worker on the fault stack (their own database and topics)."""
    fault_stack.heal()
    workdir: Path = tmp_path_factory.mktemp("faults")
    pipeline = Pipeline(
        fault_stack.settings,
        workdir,
        "flt",
        overrides={
            "requeue_interval_seconds": "1",
            "processor_metrics_port": "0",
            # The fault stack's passfile and topology, not the default stack's.
            "stack_dir": str(fault_stack.base.stack_dir),
        },
    )
    pipeline.create().start()
    pipeline.start_worker("w", env={"MINRUNTIME_WORKER_METRICS_PORT": "0"})
    try:
        yield pipeline
        for worker in pipeline.workers:
            assert worker.alive(), worker.log_tail()
        pipeline.check_alive()
        checked = pipeline.replay("--verify")
        assert checked.returncode == 0, checked.stdout + checked.stderr
    finally:
        for worker in pipeline.workers:
            worker.stop()
        pipeline.stop()
        print(f"\nprocessor log: {pipeline.log_path}")


def _all_applied(service: Pipeline, load: Load, tag: str) -> None:
    """Every acknowledged event applied, once: the log holds exactly as many as acknowledged."""
    wait_for(
        lambda: applied(service, tag) >= load.acknowledged,
        120,
        f"{load.acknowledged} events applied\n{service.log_tail()}",
    )
    assert applied(service, tag) == load.acknowledged
    dead = service.scalar("SELECT count(*) FROM minruntime.dead_letters")
    assert dead == 0, service.query("SELECT kind, message FROM minruntime.dead_letters")


def _requeue(service: Pipeline, name: str) -> str:
    """A scene whose over-running victim the worker requeues for a contender; its uid."""
    scene = Scene(service, name)
    scene.prepare({"n1": 8})
    scene.pend(scene.job("hi", 4, priority=100, min_available=4))
    return scene.start(scene.job("v", 8, priority=50, annotations=OVERRUN), "n1")


def _published_once(service: Pipeline, uids: list[str]) -> None:
    """Every decision about ``uids`` on the decisions topic exactly once."""
    wanted = {d for uid in uids for d in decision_ids(service, uid)}
    assert wanted

    def on_topic() -> list[str] | None:
        ids = [p.event["id"] for p in published(service)]
        return ids if wanted <= set(ids) else None

    ids: list[str] = wait_for(on_topic, 120, f"decisions {wanted} published")
    assert all(ids.count(d) == 1 for d in wanted), ids


def test_killing_the_leader_of_the_busiest_input_partition(
    fault_stack: FaultStack, service: Pipeline
) -> None:
    cluster = fault_stack.cluster
    with Load(service, tag="leader") as load:
        load.wait_acknowledged(2000)
        leader = cluster.leader_of(service.topics["podgroups"], 0)
        cluster.kill(leader, signal.SIGKILL)
        killed_at, acked = time.monotonic(), load.acknowledged
        # The first events produced after the kill are applied: the processor follows the
        # new leaders (Kafka's broker session timeout, 9 s, is most of it).
        recovery = timed(
            lambda: applied(service, "leader") >= acked + 500, 120, "events after the kill"
        )
        load.wait_acknowledged(1500)
    cluster.start_node(leader, 120)
    _all_applied(service, load, "leader")
    print(
        f"\nkill -9 of broker {leader} (leader of podgroups/0): applied again after "
        f"{recovery:.1f} s; producer stalled at most {load.longest_stall:.1f} s; "
        f"{load.acknowledged} events applied once ({time.monotonic() - killed_at:.0f} s)"
    )


def test_killing_the_leader_of_the_outputs_and_the_group_coordinator(
    fault_stack: FaultStack, service: Pipeline
) -> None:
    cluster = fault_stack.cluster
    coordinator = asyncio.run(_coordinator(service))
    with Load(service, tag="coordinator") as load:
        load.wait_acknowledged(1000)
        cluster.kill(coordinator, signal.SIGKILL)
        killed_at = time.monotonic()
        # Requeues committed while the decisions' leader and the coordinator are gone.
        uids = [_requeue(service, f"co{i}") for i in range(2)]
        for uid in uids:
            assert wait_decisions(service, uid)[0][0] == "committed"
        _published_once(service, uids)
        recovery = time.monotonic() - killed_at
        load.wait_acknowledged(1000)
    cluster.start_node(coordinator, 120)
    _all_applied(service, load, "coordinator")
    print(
        f"\nkill -9 of broker {coordinator} (group coordinator): two requeues committed and "
        f"published once within {recovery:.1f} s of the kill; {load.acknowledged} events "
        "applied once"
    )


async def _coordinator(service: Pipeline) -> int:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**service.kafka.client_kwargs())
    await admin.start()
    try:
        return int(await admin.find_coordinator(service.group))
    finally:
        await admin.close()


def test_two_of_three_brokers_down_nothing_is_acknowledged_then_everything_flows(
    fault_stack: FaultStack, service: Pipeline
) -> None:
    cluster = fault_stack.cluster
    survivor = cluster.leader_of(service.topics["podgroups"], 0)
    doomed = [node for node in (1, 2, 3) if node != survivor]
    with Load(service, tag="minority") as load:
        load.wait_acknowledged(1000)
        for node in doomed:
            cluster.kill(node, signal.SIGKILL)
        time.sleep(2)  # what was in flight at the kill
        during = load.acknowledged
        time.sleep(15)
        # Below min.insync.replicas (and the KRaft quorum): nothing more is acknowledged.
        assert load.acknowledged == during
        back_at = time.monotonic()
        for node in doomed:
            cluster.start_node(node, 180)
        wait_for(lambda: load.acknowledged > during, 180, "acknowledgements after the return")
        recovery = time.monotonic() - back_at
        load.wait_acknowledged(1000)
    _all_applied(service, load, "minority")
    print(
        f"\ntwo of three brokers down for 15 s: 0 events acknowledged meanwhile; writes resumed "
        f"{recovery:.1f} s after the two were started again ({time.monotonic() - back_at:.0f} s "
        f"to all applied); {load.acknowledged} events applied once"
    )


def test_a_rolling_restart_of_every_broker_loses_and_doubles_nothing(
    fault_stack: FaultStack, service: Pipeline
) -> None:
    cluster = fault_stack.cluster
    started = time.monotonic()
    with Load(service, tag="rolling") as load:
        load.wait_acknowledged(1000)
        for node in (1, 2, 3):
            cluster.stop_node(node)
            cluster.start_node(node, 180)
            wait_for(
                lambda: all(
                    len(cluster.partition_state(service.topics["podgroups"], p).isr) == 3
                    for p in range(3)
                ),
                120,
                f"broker {node} back in sync",
            )
            load.wait_acknowledged(500)
    _all_applied(service, load, "rolling")
    print(
        f"\nrolling restart of three brokers under load: {time.monotonic() - started:.0f} s, "
        f"producer stalled at most {load.longest_stall:.1f} s, {load.acknowledged} events "
        "applied once, lag back to zero"
    )


def test_reads_from_the_standby_and_what_needs_the_primary(service: Pipeline) -> None:
    """The read surface and the live operator commands answer on the read-only standby; the
    commands that build a temporary shadow schema say in one line that they need the primary.
    Prints the replication lag a reader on the standby sees under the load."""
    uid = _requeue(service, "sb")
    primary = PgAddress.parse(service.database_url)
    reader = primary.as_role(READER_ROLE).with_params(target_session_attrs="standby").uri()
    owner = primary.as_role(OWNER_ROLE).with_params(target_session_attrs="standby").uri()
    with psycopg.connect(reader) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)
        wait_for(
            lambda: (
                conn.execute(
                    "SELECT count(*) FROM minruntime.podgroups WHERE uid = %s", (uid,)
                ).fetchone()
                == (1,)
            ),
            30,
            "the podgroup on the standby",
        )
        for query in (
            "SELECT count(*) FROM minruntime.preempt_protection",
            "SELECT count(*) FROM minruntime.reclaim_protection('faults')",
            "SELECT minruntime.is_protected('sb-v', 'sb-q')",
        ):
            conn.execute(query).fetchone()
    env = {"MINRUNTIME_OWNER_DATABASE_URL": owner, "MINRUNTIME_DATABASE_URL": owner}
    env = {**service.env, **env}
    for command in (["protection"], ["explain", uid], ["violations"]):
        done = run_cli(*command, env=env)
        assert done.returncode == 0, (command, done.stderr)
    for command in (["protection", "--at", "now"], ["audit", uid], ["replay", "--verify"]):
        done = run_cli(*command, env=env)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        # One error line (replay prints its progress line first).
        assert "needs the primary" in done.stderr.strip().splitlines()[-1], done.stderr
    # The lag a reader on the standby sees while ~1,000 events/s are applied on the primary.
    lags: list[float] = []
    with Load(service, tag="standby") as load, psycopg.connect(reader) as conn:
        conn.autocommit = True
        load.wait_acknowledged(1000)
        for _ in range(40):
            (lag,) = conn.execute(
                "SELECT COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0)"
            ).fetchone() or (0,)
            lags.append(float(lag))
            time.sleep(0.25)
    _all_applied(service, load, "standby")
    lags.sort()
    print(
        f"\nreplication lag seen on the standby under load: median {lags[len(lags) // 2]:.3f} s,"
        f" max {lags[-1]:.3f} s ({len(lags)} samples)"
    )


def test_the_primary_killed_mid_batch_then_failover(
    fault_stack: FaultStack, service: Pipeline
) -> None:
    before = _requeue(service, "pg0")
    assert wait_decisions(service, before)[0][0] == "committed"
    pair = fault_stack.postgres()
    with Load(service, tag="failover") as load:
        load.wait_acknowledged(2000)
        pid = pair.primary.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the postmaster, mid-batch
        killed_at = time.monotonic()
        done = run_cli("stack", "failover", env=fault_stack.env)
        assert done.returncode == 0, done.stdout + done.stderr
        acked = load.acknowledged
        wait_for(
            lambda: _applied_or_none(service, "failover") >= acked, 120, "events after failover"
        )
        recovery = time.monotonic() - killed_at
        after = _requeue(service, "pg1")
        assert wait_decisions(service, after)[0][0] == "committed"
        load.wait_acknowledged(1000)
    _all_applied(service, load, "failover")
    # The worker kept one leadership (no decision twice), the relay published each once.
    _published_once(service, [before, after])
    assert [d[0] for d in wait_decisions(service, before)] == ["committed"]
    print(
        f"\nPostgreSQL primary kill -9 + `stack failover`: every event acknowledged by then "
        f"applied on the new primary {recovery:.1f} s after the kill; "
        f"{load.acknowledged} events applied once; decisions published once"
    )
    fault_stack.heal()


def _applied_or_none(service: Pipeline, tag: str) -> int:
    try:
        return applied(service, tag)
    except Exception:  # the database is failing over
        return -1
