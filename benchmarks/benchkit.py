"""What the benchmarks share: scratch databases, a large log built once and kept, timing.

``scratch_database`` makes a throw-away database migrated to head and drops it afterwards
(or keeps it and prints its URL); ``RecordBatches`` turns generated events into the input
records that fill one. ``log_arguments`` and ``built_log`` are the command line and the life
of a log too large to build on every run (the 1M-event benchmarks): ``--keep`` keeps the
database it builds, its URL in a file under ``benchmarks/out/``, and ``--reuse`` measures
that database again. ``timed`` and ``print_profile`` are the measuring helpers more than one
benchmark uses. ``add_prioritise`` and ``prioritised`` give a run the CPU before the other
work of a shared machine (``prioritise.sh``: docs/benchmarks.md, "Simulate at 1M and 10M
entries, measured with priority").
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from cluster import cloud_event
from minruntime.ingest import InboundRecord
from minruntime.pgurl import PgAddress
from minruntime.settings import Settings
from minruntime.store.migrate import upgrade
from minruntime_dev.scratch import (
    create_scratch_database,
    drop_scratch_database,
    scratch_owner_url,
)

PRIORITISE = Path(__file__).resolve().parent / "prioritise.sh"


def migrated_scratch_database(settings: Settings, name: str) -> str:
    """A new scratch database named from ``name``, migrated to head: its owner URL."""
    url = scratch_owner_url(settings, create_scratch_database(settings, name))
    upgrade(url)
    return url


@contextmanager
def scratch_database(settings: Settings, name: str, *, keep: bool = False) -> Iterator[str]:
    """A scratch database named from ``name``, migrated to head: its owner URL. Dropped on
    the way out, unless ``keep`` (then its URL is printed)."""
    url = scratch_owner_url(settings, create_scratch_database(settings, name))
    try:
        upgrade(url)
        yield url
    finally:
        if keep:
            print(f"kept {url}")
        else:
            drop_scratch_database(settings, url)


class RecordBatches:
    """Generated CloudEvents as input records in batches of ``size`` for ``apply_batch``: one
    partition a topic, offsets in order, ids ``bench-1``, ``bench-2``, ..."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.events = 0
        self.batch: list[InboundRecord] = []
        self.offsets: Counter[str] = Counter()

    def emit(
        self, topic: str, key: str, type_: str, data: dict[str, Any], when: datetime
    ) -> list[InboundRecord] | None:
        """Add one event; the batch it fills, if it fills one."""
        self.events += 1
        value = cloud_event(type_, key, data, when, self.events)
        self.batch.append(InboundRecord(topic, 0, self.offsets[topic], key.encode(), value, None))
        self.offsets[topic] += 1
        if len(self.batch) < self.size:
            return None
        full, self.batch = self.batch, []
        return full

    def rest(self) -> list[list[InboundRecord]]:
        """The last batch, not full, if any events wait in it."""
        return [self.batch] if self.batch else []


def sized_arguments(description: str | None, **sizes: int) -> argparse.ArgumentParser:
    """A command line with a whole-number option per keyword, in order: ``reclaim_runs=25`` is
    ``--reclaim-runs`` (default 25)."""
    parser = argparse.ArgumentParser(description=description)
    for name, default in sizes.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    return parser


def log_arguments(description: str) -> argparse.ArgumentParser:
    """A command line with the trace's size (``bench_ingest.generate``: about 1M events by
    default) and ``--keep``/``--reuse``."""
    parser = sized_arguments(description, podgroups=240_000, queues=1000, nodes=500)
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument("--keep", action="store_true", help="keep the built database")
    kept.add_argument("--reuse", action="store_true", help="measure the kept database")
    return parser


@contextmanager
def built_log(
    args: argparse.Namespace, settings: Settings, kept: Path, build: Callable[[], str]
) -> Iterator[str]:
    """The URL of the log ``build`` makes, or with ``--reuse`` of the one kept in ``kept``.
    With ``--keep`` its URL is written to ``kept``; without either it is dropped afterwards."""
    if args.reuse:
        url = kept.read_text().strip()
    else:
        url = build()
        if args.keep:
            kept.parent.mkdir(exist_ok=True)
            kept.write_text(url + "\n")
    try:
        yield url
    finally:
        if not (args.keep or args.reuse):
            drop_scratch_database(settings, url)


def timed(run: Callable[[], object]) -> float:
    """Wall seconds of ``run()``."""
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def print_profile(profile: cProfile.Profile, cumulative: int, own: int) -> None:
    """The ``cumulative`` slowest functions with their callees, then the ``own`` slowest alone."""
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(cumulative)
    stats.sort_stats("tottime").print_stats(own)
    print(out.getvalue())


def database_name(url: str) -> str:
    """The database ``url`` names (a backend's process title names it)."""
    return PgAddress.parse(url).dbname or ""


def add_prioritise(parser: argparse.ArgumentParser) -> None:
    """``--prioritise``: the run and its database's backends given the CPU (``prioritised``)."""
    parser.add_argument(
        "--prioritise",
        action="store_true",
        help="renice this run and its database's backends to -15 (root; prioritise.sh; start"
        " the benchmark with `setsid nice -n -15`)",
    )


@contextmanager
def prioritised(url: str, enabled: bool) -> Iterator[None]:
    """With ``enabled``, ``prioritise.sh`` running beside: this process, its descendants and
    the PostgreSQL backends of ``url``'s database, and their autogroups, reniced to -15
    every second (a descendant started in a session of its own gets its group reniced too)."""
    if not enabled:
        yield
        return
    loop = subprocess.Popen([str(PRIORITISE), database_name(url), str(os.getpid())])
    try:
        yield
    finally:
        loop.terminate()
        loop.wait()
