"""A private pipeline on the shared local stack, for the pipeline benchmarks.

The pattern of ``tests/e2e/harness.py``: a scratch database migrated to head, private topic
names and consumer group, and ``minruntime processor`` as a subprocess with that environment.
Events are produced with a plain aiokafka producer (JSON CloudEvents keyed by subject), as an
outside user would.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from minruntime.settings import Settings
from minruntime.store.migrate import upgrade
from minruntime.store.scratch import create_scratch_database, drop_scratch_database
from minruntime.stream.topics import ensure_topics, topic_specs

ROOT = Path(__file__).resolve().parents[1]
MINRUNTIME = str(Path(sys.executable).with_name("minruntime"))
ROLES = ("queues", "podgroups", "nodes", "nominations", "requeue-decisions", "dead-letter")
INPUT_ROLES = ("queues", "podgroups", "nodes", "nominations")


def rfc3339(moment: datetime) -> str:
    """RFC3339 with ``Z``, as a Kubernetes-side producer writes it."""
    return moment.isoformat().replace("+00:00", "Z")


class BenchPipeline:
    """Scratch database + private topics + ``minruntime processor`` subprocess."""

    def __init__(self, name: str, **overrides: str) -> None:
        self.base = Settings()
        self.suffix = f"{name}-{uuid.uuid4().hex[:8]}"
        self.topics = {role: f"bench.{role}.{self.suffix}" for role in ROLES}
        self.group = f"minruntime-bench-{self.suffix}"
        self.workdir = Path(tempfile.mkdtemp(prefix=f"minruntime-bench-{name}-"))
        self.database_url = ""
        self.overrides = overrides
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "processor.log"
        self.expected_per_role: dict[str, int] = {}

    # -- lifecycle -----------------------------------------------------------------------------
    def create(self) -> BenchPipeline:
        """Create + migrate the scratch database and create the topics (documented shapes)."""
        self.database_url = create_scratch_database(self.base, "minruntime_test_bench")
        upgrade(self.database_url)
        asyncio.run(ensure_topics(self.base.kafka_bootstrap, topic_specs(self.settings())))
        return self

    @property
    def env(self) -> dict[str, str]:
        """The processor's private environment."""
        env = {
            "MINRUNTIME_DATABASE_URL": self.database_url,
            "MINRUNTIME_KAFKA_BOOTSTRAP": self.base.kafka_bootstrap,
            "MINRUNTIME_PROCESSOR_GROUP": self.group,
            "MINRUNTIME_STATE_DIR": str(self.workdir / "processor-state"),
            **{
                f"MINRUNTIME_TOPIC_{role.upper().replace('-', '_')}": topic
                for role, topic in self.topics.items()
            },
        }
        env.update({f"MINRUNTIME_{k.upper()}": v for k, v in self.overrides.items()})
        return env

    def settings(self) -> Settings:
        """Settings as the processor subprocess sees them."""
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            return Settings()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def start(self) -> float:
        """Start ``minruntime processor``; return the monotonic time of the spawn."""
        log = self.log_path.open("ab")
        spawned = time.monotonic()
        self.process = subprocess.Popen(
            [MINRUNTIME, "processor", "--loglevel", os.environ.get("BENCH_LOGLEVEL", "warning")],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        return spawned

    def check_alive(self) -> None:
        """Fail with the processor's log when it has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"the processor exited with {self.process.returncode}:\n{self.log_tail()}"
            )

    def stop(self) -> None:
        """Stop the processor gracefully (SIGTERM), killing it after 30 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        self.process = None

    def drop(self, keep: bool = False) -> None:
        """Stop; unless ``keep``, drop the database and delete the topics."""
        self.stop()
        if keep:
            print(f"kept database {self.database_url} and topics {sorted(self.topics.values())}")
            return
        if self.database_url:
            drop_scratch_database(self.base, self.database_url)
        with contextlib.suppress(Exception):
            asyncio.run(self._delete_topics())
        shutil.rmtree(self.workdir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        """The processor's last log lines."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    async def _delete_topics(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=self.base.kafka_bootstrap)
        await admin.start()
        try:
            existing = set(await admin.list_topics())
            doomed = [t for t in self.topics.values() if t in existing]
            if doomed:
                await admin.delete_topics(doomed)
        finally:
            await admin.close()

    # -- SQL -----------------------------------------------------------------------------------
    def connect(self) -> psycopg.Connection[Any]:
        """An autocommit psycopg connection to the scratch database."""
        return psycopg.connect(self.database_url.replace("+psycopg", ""), autocommit=True)


async def produce(
    bootstrap: str, records: Iterable[tuple[str, bytes, bytes]], **options: Any
) -> int:
    """Send (topic, key, value) records with a plain aiokafka producer; return the count."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        linger_ms=options.pop("linger_ms", 20),
        max_batch_size=options.pop("max_batch_size", 512 * 1024),
        **options,
    )
    await producer.start()
    sent = 0
    try:
        pending: list[Any] = []
        for topic, key, value in records:
            pending.append(await producer.send(topic, value, key=key))
            sent += 1
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending = []
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return sent


def overrides(args: Any) -> dict[str, str]:
    """Processor settings given on the command line (``--batch-max-events`` ...)."""
    names = ("batch_max_events", "batch_within_seconds")
    return {name: str(getattr(args, name)) for name in names if getattr(args, name, None)}


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), math.ceil(fraction * len(sorted_values))))
    return sorted_values[rank - 1]
