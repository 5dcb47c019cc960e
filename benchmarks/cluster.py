"""Generated cluster shapes shared by the benchmarks (deterministic for a given Random)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any


def build_tree(rng: random.Random, count: int) -> list[tuple[str, str | None, int]]:
    """(name, parent, depth) for ``count`` queues in 5 roots, about 6 levels deep."""
    sizes = [5, 20, 100, 400, 1200]
    sizes.append(max(0, count - sum(sizes)))
    queues: list[tuple[str, str | None, int]] = []
    previous: list[str] = []
    for depth, size in enumerate(sizes):
        level = [f"q{depth}-{i}" for i in range(size)]
        for name in level:
            queues.append((name, rng.choice(previous) if previous else None, depth))
        previous = level
    return queues[:count]


def duration(rng: random.Random) -> str | None:
    """Unset 60 %, ``0s`` 10 %, 1-120 minutes 30 %."""
    roll = rng.random()
    if roll < 0.6:
        return None
    if roll < 0.7:
        return "0s"
    return f"{rng.randint(1, 120)}m"


def queue_upserts(
    rng: random.Random, tree: list[tuple[str, str | None, int]]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, ``queue.upserted`` data) for every queue of ``tree``, minimum runtimes drawn."""
    for name, parent, _ in tree:
        data: dict[str, Any] = {"name": name}
        if parent:
            data["parentQueue"] = parent
        for field in ("preemptMinRuntime", "reclaimMinRuntime"):
            value = duration(rng)
            if value is not None:
                data[field] = value
        yield name, data


def cloud_event(type_: str, subject: str, data: dict[str, Any], when: datetime, n: int) -> bytes:
    """A CloudEvents 1.0 JSON value as a producer on the cluster side writes it (id bench-n)."""
    return json.dumps(
        {
            "specversion": "1.0",
            "id": f"bench-{n}",
            "source": "bench",
            "type": type_,
            "time": when.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "subject": subject,
            "data": data,
        }
    ).encode()
