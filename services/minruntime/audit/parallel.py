"""A replay of the event log in several processes, each one part of the podgroups.

A podgroup's log entries and rows depend on no other podgroup's (``store.parts``), save the
promises a committed requeue makes to its beneficiaries, so N processes can each replay the
entries of one part of the podgroups (the first also those of the queue tree, the configs and
the nodes; a committed requeue in its victim's part and in its beneficiaries') into a shadow
of its own, and compare that part of the live state, and of every projection snapshot at its
position, with it. Every process reads the same database snapshot: this process exports its
REPEATABLE READ snapshot and each part imports it, so the N parts see exactly one log and one
live state, as one process would.

The parts are forked first, before this process opens the connection whose snapshot they
import or starts a thread (a progress bar's); each opens its own connection and never touches
one it inherited (a forked child must not use its parent's sockets). They start from the
imported modules, so a part costs a fork and a connection, not an interpreter start. Their
reports, checks and snapshot checks come back through a queue with their progress, and are
merged (``verify.merge_parts``, ``snapshots.merge_parts``): what ``replay --verify`` prints
is the same with any number of parts, except the checksums of a table split in parts (an md5
of the parts' md5s).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from multiprocessing.connection import Connection as Pipe
from typing import Any, Final, Self, TypeAlias

from sqlalchemy import Connection

from minruntime.audit.replay import SHOWN_REJECTIONS, Progress, ReplayReport, read_log
from minruntime.audit.snapshots import CheckedReplay, replay_checked, snapshots_in
from minruntime.audit.snapshots import merge_parts as merge_snapshot_checks
from minruntime.audit.verify import merge_parts as merge_checks
from minruntime.store import engine_from
from minruntime.store.failures import needs_the_primary
from minruntime.store.parts import Part
from minruntime.store.read_transactions import export_snapshot, import_snapshot, repeatable_read
from minruntime.store.shadows import create_shadow, temporary_name

# The most parts ``default_parts`` chooses, and the shortest log it splits at all: a part
# costs a fork, a connection and a shadow, and each part's process its own PostgreSQL backend.
MOST_PARTS: Final = 8
SPLIT_FROM_ENTRIES: Final = 20_000
_POLL_SECONDS: Final = 0.2


class PartFailedError(RuntimeError):
    """A part of a parallel replay failed or stopped; the message says which and why."""


def spare_core(processes: int) -> bool:
    """Whether this machine has a core beyond ``processes`` replaying ones: then each computes
    the live side's checksums beside its fold (``verify.checksums_beside``), on that core.
    Without one it would only compete with the folds (measured: no gain with 2 parts on 2
    cores, docs/benchmarks.md)."""
    return processes < len(os.sched_getaffinity(0))


def default_parts(entries: int) -> int:
    """How many parts to replay a log of ``entries`` in: this machine's cores (at most
    ``MOST_PARTS``), one for a log under ``SPLIT_FROM_ENTRIES``."""
    if entries < SPLIT_FROM_ENTRIES:
        return 1
    return min(MOST_PARTS, len(os.sched_getaffinity(0)))


# What the parts send back: (kind, part index, payload).
Outbox: TypeAlias = "multiprocessing.Queue[tuple[str, int, Any]]"
# A part's work in its process: (connection in the imported snapshot, the part, progress=).
Work = Callable[..., Any]


class ForkedParts:
    """``parts`` processes forked when it is made, part ``i`` calling
    ``work(conn, Part(i, parts), progress=...)`` on its own connection to ``url`` in the
    snapshot ``results`` exports (``with``: stopped at the end).

    Made before this process opens the connection whose snapshot the parts import or starts a
    thread (a progress bar's): a fork copies only the forking thread. ``what`` names the parts
    in their errors (``replay part 2 of 4 failed: …``).
    """

    def __init__(self, what: str, url: str, parts: int, work: Work) -> None:
        self._what = what
        context = multiprocessing.get_context("fork")
        self._outbox: Outbox = context.Queue()
        self._inboxes: list[Pipe] = []
        self._workers: list[multiprocessing.process.BaseProcess] = []
        for index in range(parts):
            receive, send = context.Pipe(duplex=False)
            worker = context.Process(
                target=_run_part,
                args=(url, Part(index, parts), work, receive, self._outbox),
                name=f"minruntime-{what}-part-{index}",
                daemon=True,
            )
            worker.start()
            receive.close()
            self._inboxes.append(send)
            self._workers.append(worker)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def results(self, conn: Connection, progress: Progress | None = None) -> list[Any]:
        """Export ``conn``'s database snapshot to the parts and wait for them (the exporting
        transaction stays open until every part is done with it); their results in order."""
        exported = export_snapshot(conn)
        for inbox in self._inboxes:
            inbox.send(exported)
        found = self._collect(progress)
        return [found[index] for index in range(len(self._workers))]

    def close(self) -> None:
        """Stop the parts still running (after a failure or an interrupt) and reap them."""
        for worker in self._workers:
            if worker.is_alive():
                worker.terminate()
            worker.join()
        for inbox in self._inboxes:
            inbox.close()

    def _collect(self, progress: Progress | None) -> dict[int, Any]:
        """Every part's result; PartFailedError as soon as one fails or dies.

        A part that was killed (a non-zero exit code) is noticed at the next message or poll;
        one that exited without a word only when the queue is empty (a part that is done exits
        right after its result is in the queue, possibly before this process has read it).
        """
        found: dict[int, Any] = {}
        seen = [0] * len(self._workers)
        while len(found) < len(self._workers):
            try:
                kind, index, payload = self._outbox.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                self._check_alive(found, clean_exit_too=True)
                continue
            if kind == "progress":
                seen[index] = payload
                if progress is not None:
                    progress(sum(seen))
            elif kind == "done":
                found[index] = payload
            else:
                raise PartFailedError(f"{self._part(index)} failed: {payload}")
            self._check_alive(found, clean_exit_too=False)
        return found

    def _check_alive(self, found: dict[int, Any], *, clean_exit_too: bool) -> None:
        for index, worker in enumerate(self._workers):
            code = worker.exitcode
            if index in found or code is None or (code == 0 and not clean_exit_too):
                continue
            raise PartFailedError(
                f"{self._part(index)} stopped (exit code {code}) before it finished"
            )

    def _part(self, index: int) -> str:
        return f"{self._what} part {index + 1} of {len(self._workers)}"


class ReplayInParts(ForkedParts):
    """A replay of the live log in ``parts`` processes (``with``: stopped at the end).

    Made before this process starts a thread (``ForkedParts``). ``run`` replays and, with
    ``verify``, compares each part; ``url`` is the owner's database URL (each part connects
    with it).
    """

    def __init__(
        self, url: str, parts: int, *, verify: bool, until: datetime | None = None
    ) -> None:
        if parts < 2:
            raise ValueError("a replay in parts needs 2 parts or more")
        self._url = url
        super().__init__("replay", url, parts, partial(replay_part, verify=verify, until=until))

    def run(self, progress: Progress | None = None) -> CheckedReplay:
        """Export this process's database snapshot to the parts, wait for them, merge."""
        started = time.perf_counter()
        engine = engine_from(self._url, pool_pre_ping=False)
        try:
            with repeatable_read(engine) as conn:
                ordered: list[CheckedReplay] = self.results(conn, progress)
        finally:
            engine.dispose()
        report = _merged_report([result.report for result in ordered])
        report.seconds = time.perf_counter() - started
        return CheckedReplay(
            report,
            merge_checks(result.checks for result in ordered),
            merge_snapshot_checks(result.snapshots for result in ordered),
        )


def _run_part(url: str, part: Part, work: Work, inbox: Pipe, outbox: Outbox) -> None:
    """One part's body in its forked process: import the exported snapshot into a repeatable
    read, ``work`` on it (its progress sent as ("progress", index, done)), send ("done", index,
    result), or ("failed", index, one line)."""
    try:
        exported = inbox.recv()
        engine = engine_from(url, pool_pre_ping=False)
        with repeatable_read(engine) as conn:
            import_snapshot(conn, exported)
            result = work(
                conn, part, progress=lambda done: outbox.put(("progress", part.index, done))
            )
        engine.dispose()
        outbox.put(("done", part.index, result))
    except BaseException as error:
        reason = needs_the_primary(error) or f"{type(error).__name__}: {error}".splitlines()[0]
        outbox.put(("failed", part.index, reason))
    finally:
        outbox.close()
        outbox.join_thread()


def replay_part(
    conn: Connection,
    part: Part,
    *,
    verify: bool,
    until: datetime | None = None,
    progress: Progress | None = None,
) -> CheckedReplay:
    """Replay one part of the log into a temporary shadow in ``conn``'s snapshot, checking
    that part of every stored projection snapshot and, with ``verify``, of the live state."""
    stored = snapshots_in(conn) if verify else []
    shadow = create_shadow(conn, temporary_name(f"minruntime_replay_{part.index}"))
    return replay_checked(
        conn,
        shadow,
        read_log(conn, until=until, part=part, positions=[s.log_seq for s in stored]),
        stored,
        verify=verify,
        part=part,
        progress=progress,
        live_beside=spare_core(part.of),
    )


def _merged_report(reports: Sequence[ReplayReport]) -> ReplayReport:
    merged = ReplayReport()
    rejections: list[tuple[int, str]] = []
    for report in reports:
        merged.events += report.events
        merged.decisions += report.decisions
        merged.ignored += report.ignored
        merged.rejected_count += report.rejected_count
        merged.dead_lettered += report.dead_lettered
        merged.batches += report.batches
        rejections.extend(zip(report.rejected_at, report.rejected, strict=True))
        if report.last_seq is not None:
            merged.last_seq = max(merged.last_seq or 0, report.last_seq)
    first = sorted(rejections, key=lambda rejection: rejection[0])[:SHOWN_REJECTIONS]
    merged.rejected_at = [seq for seq, _ in first]
    merged.rejected = [line for _, line in first]
    return merged
