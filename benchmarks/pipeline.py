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
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from minruntime.kafka_access import KafkaAccess
from minruntime.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the private pipeline is the e2e tests' own harness

from tests.e2e.harness import Pipeline  # noqa: E402

INPUT_ROLES = ("queues", "podgroups", "nodes", "nominations")


def rfc3339(moment: datetime) -> str:
    """RFC3339 with ``Z``, as a Kubernetes-side producer writes it."""
    return moment.isoformat().replace("+00:00", "Z")


class BenchPipeline(Pipeline):
    """The e2e harness's private pipeline, with `bench.*` topics created up front."""

    def __init__(self, name: str, **overrides: str) -> None:
        workdir = Path(tempfile.mkdtemp(prefix=f"minruntime-bench-{name}-"))
        super().__init__(
            Settings(),
            workdir,
            f"{name}-",
            topic_prefix="bench",
            overrides=overrides,
            loglevel=os.environ.get("BENCH_LOGLEVEL", "warning"),
        )
        self.expected_per_role: dict[str, int] = {}

    def create(self, with_topics: bool = True) -> BenchPipeline:
        """Scratch database migrated to head, and the topics in their documented shapes."""
        super().create(with_topics=with_topics)
        return self

    def drop(self, keep: bool = False, verify: bool = False) -> None:
        """Stop; unless `keep`, drop the database, the topics and the work directory.

        No replay check by default: a benchmark measures, the tests verify.
        """
        super().drop(keep, verify)
        if not keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


async def produce(
    access: KafkaAccess, records: Iterable[tuple[str, bytes, bytes]], **options: Any
) -> int:
    """Send (topic, key, value) records with a plain aiokafka producer; return the count."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        **access.client_kwargs(),
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


@contextlib.contextmanager
def private_broker(protocol: str) -> Iterator[None]:
    """A broker of its own (stack code, private port and stack dir) with a `protocol` listener.

    While it runs, the MINRUNTIME_KAFKA_* variables point every client of the benchmark (its
    own and the processor subprocess) at it, with the credentials and CA it generated.
    """
    from tests.conftest import free_port_pair

    from minruntime.kafka_access import kafka_access
    from minruntime_dev.stack.kafka import KafkaNode

    port = free_port_pair()  # the broker's and, one above, its controller's
    stack_dir = Path(tempfile.mkdtemp(prefix="minruntime-bench-broker-"))
    broker = Settings().model_copy(
        update={
            "kafka_bootstrap": f"127.0.0.1:{port}",
            "stack_dir": stack_dir,
            "kafka_security_protocol": protocol,
        }
    )
    node = KafkaNode(broker)
    saved = {k: v for k, v in os.environ.items() if k.startswith("MINRUNTIME_KAFKA_")}
    try:
        node.start()
        node.wait_ready(broker.stack_timeout_seconds)
        access = kafka_access(broker)
        os.environ["MINRUNTIME_KAFKA_BOOTSTRAP"] = access.bootstrap
        os.environ["MINRUNTIME_KAFKA_SECURITY_PROTOCOL"] = access.protocol
        for name, value in (
            ("USERNAME", access.username),
            ("PASSWORD", access.password),
            ("SSL_CAFILE", access.cafile),
        ):
            if value is not None:
                os.environ[f"MINRUNTIME_KAFKA_{name}"] = str(value)
        yield
    finally:
        node.stop()
        shutil.rmtree(stack_dir, ignore_errors=True)
        for name in [k for k in os.environ if k.startswith("MINRUNTIME_KAFKA_")]:
            del os.environ[name]
        os.environ.update(saved)


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), math.ceil(fraction * len(sorted_values))))
    return sorted_values[rank - 1]
