"""``replay --verify`` of a database a benchmark filled, timed (what `bench_ingest` compares
with the processor's live rate: issue 10's target is a replay at >= 5x it).

Runs the command's own code in-process: one REPEATABLE READ transaction, a temporary shadow,
the whole event log replayed (every projection snapshot checked at its position, if any),
every projection table compared with the live one; rolled back at the end.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass

from minruntime.audit.parallel import ReplayInParts, replay_part, spare_core
from minruntime.audit.replay import LogEntry, read_log, replay
from minruntime.audit.snapshots import SnapshotChecker, snapshots_in
from minruntime.audit.verify import checksums_beside, compare
from minruntime.store import engine_from
from minruntime.store.parts import Part
from minruntime.store.read_transactions import repeatable_read
from minruntime.store.shadows import create_shadow, temporary_name


@dataclass(frozen=True)
class Verified:
    """One timed ``replay --verify``."""

    events: int
    replay_seconds: float  # the replay itself (snapshot checks included)
    verify_seconds: float  # the comparison with the live tables
    equal: bool
    snapshots: int = 0  # snapshots checked at their positions
    check_seconds: float = 0.0  # of replay_seconds, the snapshot checks

    @property
    def seconds(self) -> float:
        return self.replay_seconds + self.verify_seconds

    @property
    def rate(self) -> float:
        """Events per second of the whole command (replay and comparison)."""
        return self.events / self.seconds


def replay_verify(owner_url: str, parts: int = 1) -> Verified:
    """Time ``minruntime replay --verify`` against the database at ``owner_url``; with
    ``parts`` > 1 as ``--jobs PARTS`` (``replay_seconds`` is then the whole command: the
    parts replay and compare at once)."""
    if parts > 1:
        with ReplayInParts(owner_url, parts, verify=True) as split:
            result = split.run()
        equal = (
            not result.report.rejected
            and all(check.equal for check in result.checks)
            and all(check.equal for check in result.snapshots)
        )
        return Verified(
            result.report.applied, result.report.seconds, 0.0, equal, len(result.snapshots)
        )
    engine = engine_from(owner_url)
    try:
        with repeatable_read(engine) as conn:
            shadow = create_shadow(conn, temporary_name("bench_verify"))
            checker = SnapshotChecker(conn, shadow.tables, snapshots_in(conn))
            checking = 0.0

            def check(entry: LogEntry) -> None:
                nonlocal checking
                started = time.perf_counter()
                checker.after(entry)
                checking += time.perf_counter() - started

            started = time.perf_counter()
            # As ``snapshots.replay_checked`` in one process: the live checksums computed
            # beside the replay when a core is spare (``parallel.spare_core``).
            with ExitStack() as stack:
                live_checksums = (
                    stack.enter_context(checksums_beside(conn)) if spare_core(1) else None
                )
                report = replay(
                    conn,
                    read_log(conn),
                    into=shadow.tables,
                    boundary=checker.wants,
                    after_boundary=check,
                    new_shadow=True,
                )
                replayed = time.perf_counter() - started
                started = time.perf_counter()
                checks = compare(
                    conn,
                    shadow,
                    live_checksums=None if live_checksums is None else live_checksums(),
                )
            results = checker.finish()
            verified = time.perf_counter() - started
    finally:
        engine.dispose()
    equal = (
        not report.rejected
        and all(check.equal for check in checks)
        and all(result.equal for result in results)
    )
    return Verified(report.applied, replayed, verified, equal, len(results), checking)


def parts_alone(owner_url: str, parts: int) -> list[float]:
    """Seconds of each part of a ``replay --verify --jobs PARTS``, run one after another,
    each alone on the machine (its own snapshot of the unchanging database, shadow, replay
    of its share, comparison of its share): the slowest is the command's critical path on a
    machine with a core for each part and for each part's PostgreSQL backend. What this
    2-core machine cannot run at once, measured part by part; not a run on more cores."""
    engine = engine_from(owner_url)
    seconds = []
    try:
        for index in range(parts):
            part = Part(index, parts)
            started = time.perf_counter()
            with repeatable_read(engine) as conn:
                result = replay_part(conn, part, verify=True)
            seconds.append(time.perf_counter() - started)
            if not all(check.equal for check in result.checks) or result.report.rejected:
                raise SystemExit(f"part {index} of {parts} differs")
    finally:
        engine.dispose()
    return seconds
