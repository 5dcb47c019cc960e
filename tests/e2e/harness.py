"""Running the real processor against the real stack, isolated per test module.

Each `Pipeline` gets its own PostgreSQL database (migrated to head), its own topic names and
consumer group, and runs `minruntime processor` as a subprocess — so it can be killed with
SIGKILL like a real crash. Events are produced with a plain aiokafka producer, as an outside
user would.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import psycopg
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from minruntime.kafka_access import KafkaAccess, kafka_access, start_client
from minruntime.settings import Settings
from minruntime.store.migrate import upgrade
from minruntime.topic_admin import ensure_topics, topic_specs
from minruntime_dev.scratch import (
    SCRATCH_PREFIX,
    create_scratch_database,
    drop_scratch_database,
    scratch_owner_url,
)
from tests.conftest import MINRUNTIME, ROOT, environ, run_cli

TOPIC_ENV = {
    "queues": "MINRUNTIME_TOPIC_QUEUES",
    "podgroups": "MINRUNTIME_TOPIC_PODGROUPS",
    "nodes": "MINRUNTIME_TOPIC_NODES",
    "nominations": "MINRUNTIME_TOPIC_NOMINATIONS",
    "requeue_decisions": "MINRUNTIME_TOPIC_REQUEUE_DECISIONS",
    "dead_letter": "MINRUNTIME_TOPIC_DEAD_LETTER",
    "protection": "MINRUNTIME_TOPIC_PROTECTION",
}


def kafka_env(settings: Settings) -> dict[str, str]:
    """The MINRUNTIME_KAFKA_* variables a subprocess needs to reach `settings`' broker."""
    access = kafka_access(settings)
    env = {
        "MINRUNTIME_KAFKA_BOOTSTRAP": access.bootstrap,
        "MINRUNTIME_KAFKA_SECURITY_PROTOCOL": access.protocol,
    }
    if access.uses_sasl:
        env["MINRUNTIME_KAFKA_SASL_MECHANISM"] = access.mechanism
        env["MINRUNTIME_KAFKA_USERNAME"] = access.username or ""
        env["MINRUNTIME_KAFKA_PASSWORD"] = access.password or ""
    if access.cafile is not None:
        env["MINRUNTIME_KAFKA_SSL_CAFILE"] = str(access.cafile)
    return env


async def create_topic(access: KafkaAccess, topic: str, replicas: int = 1) -> None:
    """Create ``topic`` (one partition, ``replicas`` replicas) with a client of its own."""
    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, replicas)])
    finally:
        await admin.close()


def wait_for(
    check: Callable[[], Any], timeout: float = 30.0, what: str = "condition", every: float = 0.1
) -> Any:
    """Poll every `every` seconds until `check()` returns something truthy; fail with `what`
    after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def probe(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET http://127.0.0.1:port/path; (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()
    except (urllib.error.URLError, OSError) as error:
        return 0, str(error)


def one_error_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The command exited with `code` and wrote exactly one line on stderr: that line."""
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


class Subprocess:
    """A `minruntime` subprocess: kill it like a crash, stop it like an operator, read its log."""

    process: subprocess.Popen[bytes] | None
    log_path: Path
    env: dict[str, str]

    def _spawn(self, *args: str) -> None:
        """Start `minruntime ARGS` with this process's env, its output appended to its log."""
        assert self.process is None or self.process.poll() is not None
        self.process = subprocess.Popen(
            [MINRUNTIME, *args],
            env={**os.environ, **self.env},
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def kill(self, sig: int = signal.SIGKILL) -> int:
        """Send `sig` and wait for the process to end; return its exit status."""
        assert self.process is not None
        self.process.send_signal(sig)
        code = self.process.wait(60)
        self.process = None
        return code

    def stop(self) -> None:
        """Stop it gracefully (SIGTERM), or SIGKILL it after 30 s."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)

    def log_tail(self, lines: int = 30) -> str:
        """The last log lines (for assertion messages)."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


class Pipeline(Subprocess):
    """A private database + topic set + processor subprocess on the shared real stack.

    The benchmarks use it too (`benchmarks/pipeline.py`), with their own topic prefix and
    processor settings (`overrides`: MINRUNTIME_* names without the prefix, lower case).
    """

    def __init__(
        self,
        base: Settings,
        workdir: Path,
        name: str = "",
        *,
        topic_prefix: str = "kai",
        overrides: Mapping[str, str] | None = None,
        loglevel: str = "info",
    ) -> None:
        self.suffix = f"{name or 'p'}{uuid.uuid4().hex[:8]}"
        self.base = base
        self.kafka = kafka_access(base)  # how this test's clients reach the broker
        self.workdir = workdir
        self.loglevel = loglevel
        self.database_url = ""  # set by create()
        self.topics = {role: f"{topic_prefix}.{role}.{self.suffix}" for role in TOPIC_ENV}
        self.group = f"minruntime-processor-{self.suffix}"
        self.env: dict[str, str] = {
            **kafka_env(base),
            "MINRUNTIME_PROCESSOR_GROUP": self.group,
            "MINRUNTIME_STATE_DIR": str(workdir / "processor-state"),
            # No fixed metrics ports: several pipelines may run at once (tests ask for one).
            "MINRUNTIME_PROCESSOR_METRICS_PORT": "0",
            "MINRUNTIME_WORKER_METRICS_PORT": "0",
            "MINRUNTIME_KUBE_BRIDGE_METRICS_PORT": "0",
            "MINRUNTIME_KUBE_EVICTOR_METRICS_PORT": "0",
            **{TOPIC_ENV[role]: topic for role, topic in self.topics.items()},
            **{f"MINRUNTIME_{k.upper()}": v for k, v in (overrides or {}).items()},
        }
        self.process: subprocess.Popen[bytes] | None = None
        self.spawned_at = 0.0  # time.monotonic() of the last start()
        self.log_path = workdir / f"processor-{self.suffix}.log"
        self.workers: list[Worker] = []

    # -- lifecycle -------------------------------------------------------------------------
    def create(self, with_topics: bool = False) -> Pipeline:
        """Create and migrate the private database (and create the topics, if asked)."""
        self.database_url = create_scratch_database(self.base, f"{SCRATCH_PREFIX}_e2e")
        self.env["MINRUNTIME_DATABASE_URL"] = self.database_url
        upgrade(self.settings())
        if with_topics:
            asyncio.run(ensure_topics(self.kafka, topic_specs(self.settings())))
        return self

    def settings(self) -> Settings:
        """Settings as the processor subprocess sees them."""
        with environ(self.env):
            return Settings()

    def start(self) -> Pipeline:
        """Start `minruntime processor` (creates the topics if missing)."""
        self.spawn()
        wait_for(self._topics_exist, 60, "the processor to create its topics")
        return self

    def spawn(self) -> Pipeline:
        """Start `minruntime processor` without waiting for anything (Kafka may be down)."""
        self.spawned_at = time.monotonic()
        self._spawn("processor", "--loglevel", self.loglevel)
        return self

    def check_alive(self) -> None:
        """Fail with the processor's log when it has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"the processor exited with {self.process.returncode}:\n{self.log_tail()}"
            )

    def start_worker(self, name: str = "w", env: Mapping[str, str] | None = None) -> Worker:
        """Start a `minruntime requeue-worker` replica on this pipeline's database and topics."""
        worker = Worker(self, name, {**self.env, **(env or {})})
        self.workers.append(worker)
        return worker.start()

    def replay(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `minruntime replay ARGS` against this pipeline's database and topics."""
        return run_cli("replay", *args, env=self.env, timeout=300)

    def drop(self, keep: bool = False, verify: bool = True) -> None:
        """Stop; unless `keep`, drop the database and delete the topics.

        With `verify` (the tests' default), first prove that the state the test left is
        exactly what its event log implies: `minruntime replay --verify` must pass.
        """
        for worker in self.workers:
            worker.stop()
        self.stop()
        if verify and not keep and self.database_url:
            checked = self.replay("--verify")
            if checked.returncode != 0:
                self.drop(verify=False)
                raise AssertionError(
                    f"replay --verify failed after the test (rc {checked.returncode}):\n"
                    f"{checked.stdout}\n{checked.stderr}"
                )
        if keep:
            print(f"kept database {self.database_url} and topics {sorted(self.topics.values())}")
            return
        if self.database_url:
            drop_scratch_database(self.base, self.database_url)
        asyncio.run(self._delete_topics())

    # -- Kafka -------------------------------------------------------------------------------
    def existing_topics(self) -> set[str]:
        """Every topic the broker has."""
        return asyncio.run(self._list_topics())

    def _topics_exist(self) -> bool:
        return self.existing_topics() >= set(self.topics.values())

    async def _list_topics(self) -> set[str]:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(**self.kafka.client_kwargs())
        await start_client(admin, self.kafka)
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    async def _delete_topics(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(**self.kafka.client_kwargs())
        await start_client(admin, self.kafka)
        try:
            existing = set(await admin.list_topics())
            # The kube bridge's ledger (`<podgroups topic>.bridge`) goes with the topics.
            mine = [*self.topics.values(), f"{self.topics['podgroups']}.bridge"]
            doomed = [t for t in mine if t in existing]
            if doomed:
                await admin.delete_topics(doomed)
        finally:
            await admin.close()

    def produce(self, role: str, records: Iterable[tuple[bytes | None, bytes]]) -> int:
        """Send raw (key, value) records to the role's topic with a plain aiokafka producer."""
        return asyncio.run(self._produce(self.topics[role], list(records)))

    async def _produce(self, topic: str, records: Sequence[tuple[bytes | None, bytes]]) -> int:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            **self.kafka.client_kwargs(), enable_idempotence=True, linger_ms=5
        )
        await start_client(producer, self.kafka)
        try:
            futures = [await producer.send(topic, value, key=key) for key, value in records]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        return len(records)

    def produce_events(self, role: str, events: Iterable[Mapping[str, Any]]) -> int:
        """Send CloudEvent dicts as JSON, keyed by their subject."""
        return self.produce(
            role,
            ((str(e["subject"]).encode(), json.dumps(e).encode()) for e in events),
        )

    def consume(self, role: str, count: int, timeout: float = 30.0) -> list[Any]:
        """Read `count` records from the start of the role's topic."""
        return asyncio.run(self._consume(self.topics[role], count, timeout))

    async def _consume(self, topic: str, count: int, timeout: float) -> list[Any]:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(
            topic,
            **self.kafka.client_kwargs(),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await start_client(consumer, self.kafka)
        got: list[Any] = []
        try:
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                for messages in batch.values():
                    got.extend(messages)
        finally:
            await consumer.stop()
        return got

    # -- SQL -----------------------------------------------------------------------------------
    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit connection to the private database."""
        return psycopg.connect(self.database_url, autocommit=True)

    def connect_as_owner(self) -> psycopg.Connection[Any]:
        """An autocommit connection as the role that owns the schema (for DDL in a test)."""
        return psycopg.connect(scratch_owner_url(self.base, self.database_url), autocommit=True)

    def query(self, statement: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[Any]:
        """Run SQL as a user would and return all rows."""
        with psycopg.connect(self.database_url) as conn:
            return conn.execute(statement, params or None).fetchall()  # type: ignore[arg-type]

    def scalar(self, statement: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Any:
        """The first column of the first row."""
        rows = self.query(statement, params)
        return rows[0][0] if rows else None

    def wait_applied(self, count: int, timeout: float = 60) -> None:
        """Wait until the event log holds at least `count` events."""
        wait_for(
            lambda: self.scalar("SELECT count(*) FROM minruntime.event_log") >= count,
            timeout,
            f"{count} applied events\n{self.log_tail()}",
        )


@contextmanager
def running_pipeline(
    settings: Settings, workdir: Path, name: str, **overrides: str
) -> Iterator[Pipeline]:
    """A created and started Pipeline (``overrides`` as Pipeline's), dropped on the way out:
    which first proves `replay --verify` equal (``Pipeline.drop``)."""
    pipeline = Pipeline(settings, workdir, name, overrides=overrides)
    try:
        yield pipeline.create().start()
    finally:
        pipeline.drop()


class Worker(Subprocess):
    """One more long-running process of a Pipeline, on its database and topics.

    By default a `minruntime requeue-worker` replica; ``command="processor"`` is one more
    processor instance in the pipeline's consumer group (give each its own metrics port).
    """

    def __init__(
        self,
        pipeline: Pipeline,
        name: str,
        env: Mapping[str, str],
        command: str = "requeue-worker",
    ) -> None:
        self.pipeline = pipeline
        self.name = name
        self.env = dict(env)
        self.command = command
        self.process: subprocess.Popen[bytes] | None = None
        prefix = "worker" if command == "requeue-worker" else command
        self.log_path = pipeline.workdir / f"{prefix}-{name}-{pipeline.suffix}.log"

    def start(self) -> Worker:
        """Spawn the process (a worker replica decides by itself: active or standby)."""
        self._spawn(self.command, "--loglevel", "info")
        return self

    @property
    def pid(self) -> int:
        """The replica's process id."""
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        """True while the subprocess runs."""
        return self.process is not None and self.process.poll() is None

    def wait(self, timeout: float = 60.0) -> int:
        """Wait for the process to exit by itself; return its exit status."""
        assert self.process is not None
        code = self.process.wait(timeout)
        self.process = None
        return code


@dataclass(frozen=True)
class PipelineCli:
    """A running pipeline and ``minruntime COMMAND ARGS`` against it, in a terminal
    ``COLUMNS`` wide (wide enough that a table's cells stay on one line)."""

    command: ClassVar[tuple[str, ...]] = ()
    columns: ClassVar[int] = 400

    pipeline: Pipeline

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**self.pipeline.env, "COLUMNS": str(self.columns)}
        return run_cli(*self.command, *args, env=env)
