"""Benchmark the outbox relay: rows published per second, with and without refused rows.

Builds a scratch database (never the service's own) migrated to head and a fresh topic with
3 partitions, inserts ``--rows`` outbox rows of ``--size`` bytes (100 keys) and, with
``--refused``, that many 2 MiB rows spread among them (the broker refuses them: they are set
aside, the rest flows), then runs ``OutboxRelay.publish_once`` until nothing is pending and
prints wall and CPU time.

    .venv/bin/python benchmarks/bench_outbox_relay.py [--rows 10000] [--size 500] [--refused 0]

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import asyncio
import time
import uuid

from benchkit import sized_arguments
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.migrate import upgrade
from minruntime.stream.relay import OutboxRelay
from minruntime_dev.scratch import create_scratch_database, drop_scratch_database

_ROWS = (
    "INSERT INTO minruntime_state.outbox (id, topic, key, payload, created_at)"
    " SELECT gen_random_uuid(), %(topic)s, convert_to('k' || (g %% 100)::text, 'UTF8'),"
    " convert_to(repeat('x', %(size)s), 'UTF8'), now() + g * interval '1 microsecond'"
    " FROM generate_series(1, %(rows)s) g"
)
_REFUSED = (
    "INSERT INTO minruntime_state.outbox (id, topic, key, payload, created_at)"
    " SELECT gen_random_uuid(), %(topic)s, 'big', convert_to(repeat('x', 2097152), 'UTF8'),"
    " now() + (g * %(every)s) * interval '1 microsecond' FROM generate_series(1, %(refused)s) g"
)


async def create_topic(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        await admin.close()


async def drain(settings: Settings, url: str) -> tuple[int, int, float, float]:
    """Publish until nothing is pending: (published, set aside, wall s, CPU s)."""
    from aiokafka import AIOKafkaProducer

    engine = engine_from(url)
    relay = OutboxRelay(engine, kafka_access(settings))
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, enable_idempotence=True)
    await producer.start()
    published = set_aside = 0
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        while True:
            report = await relay.publish_once(producer)
            if not report.published and not report.set_aside:
                break
            published += len(report.published)
            set_aside += len(report.set_aside)
        return published, set_aside, time.perf_counter() - wall, time.process_time() - cpu
    finally:
        await producer.stop()
        engine.dispose()


def main() -> None:
    description = __doc__.splitlines()[0] if __doc__ else None
    parser = sized_arguments(description, rows=10_000, size=500, refused=0)
    args = parser.parse_args()
    settings = Settings()
    url = create_scratch_database(settings, "minruntime_test_bench_relay")
    try:
        upgrade(url)
        topic = f"bench.relay.{uuid.uuid4().hex[:8]}"
        asyncio.run(create_topic(settings.kafka_bootstrap, topic))
        engine = engine_from(url)
        with engine.begin() as conn:
            params = {"topic": topic, "size": args.size, "rows": args.rows}
            conn.exec_driver_sql(_ROWS, params)
            if args.refused:
                every = max(args.rows // args.refused, 1)
                conn.exec_driver_sql(
                    _REFUSED, {"topic": topic, "every": every, "refused": args.refused}
                )
        engine.dispose()
        published, set_aside, wall, cpu = asyncio.run(drain(settings, url))
        print(
            f"published {published:,} rows ({args.size} B) and set aside {set_aside} refused"
            f" rows in {wall:.2f} s wall, {cpu:.2f} s CPU: {published / wall:,.0f} rows/s"
        )
    finally:
        drop_scratch_database(settings, url)


if __name__ == "__main__":
    main()
