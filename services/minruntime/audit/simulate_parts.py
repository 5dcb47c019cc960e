"""A simulation in several processes, each folding one part of the podgroups.

A podgroup's log entries depend on no other podgroup's (``store.parts``), so N forked
processes each read the entries of one part (and the queue and configuration entries, which
every part applies) and fold them: their runs are judged there. The decisions and the facts
about the beneficiaries of committed requeues come back to this process, which judges the
decisions in log order (``audit.simulate._decided``). Every part imports this process's
exported REPEATABLE READ snapshot, READ ONLY: the N parts read exactly one log, as one
process would, and write nothing. As in ``audit.parallel``, the parts are forked before this
process's transaction is opened, and each opens its own connection.
"""

from __future__ import annotations

import multiprocessing
import queue as queues
from multiprocessing.connection import Connection as Pipe
from typing import Any, Final

from sqlalchemy import Connection, Engine

from minruntime.audit.parallel import PartFailedError, run_part
from minruntime.audit.replay import read_log
from minruntime.audit.simulate import FoldedPart, Window, fold_part
from minruntime.store.parts import Part
from minruntime.store.read_transactions import (
    export_snapshot,
    read_only,
)

_POLL_SECONDS: Final = 0.2


def fold_in_parts(
    engine: Engine,
    conn: Connection,
    parts: int,
    window: Window,
    beneficiaries: frozenset[str],
) -> list[FoldedPart]:
    """Fold the log of ``conn``'s snapshot in ``parts`` processes; their results in order."""
    url = engine.url.render_as_string(hide_password=False)
    context = multiprocessing.get_context("fork")
    outbox: multiprocessing.Queue[tuple[str, int, Any]] = context.Queue()
    workers = []
    inboxes: list[Pipe] = []
    try:
        for index in range(parts):
            receive, send = context.Pipe(duplex=False)
            worker = context.Process(
                target=_fold_part,
                args=(url, Part(index, parts), window, beneficiaries, receive, outbox),
                name=f"minruntime-simulate-part-{index}",
                daemon=True,
            )
            worker.start()
            receive.close()
            inboxes.append(send)
            workers.append(worker)
        exported = export_snapshot(conn)
        for inbox in inboxes:
            inbox.send(exported)
        found: dict[int, FoldedPart] = {}
        while len(found) < parts:
            try:
                kind, index, payload = outbox.get(timeout=_POLL_SECONDS)
            except queues.Empty:
                for index, worker in enumerate(workers):
                    if index not in found and worker.exitcode not in (None, 0):
                        raise PartFailedError(
                            f"simulation part {index + 1} of {parts} stopped "
                            f"(exit code {worker.exitcode})"
                        ) from None
                continue
            if kind == "failed":
                raise PartFailedError(f"simulation part {index + 1} of {parts} failed: {payload}")
            found[index] = payload
        return [found[index] for index in range(parts)]
    finally:
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
            worker.join()
        for inbox in inboxes:
            inbox.close()


def _fold_part(
    url: str,
    part: Part,
    window: Window,
    beneficiaries: frozenset[str],
    inbox: Pipe,
    outbox: multiprocessing.Queue[tuple[str, int, Any]],
) -> None:
    """One part, in its forked process: import the snapshot, fold, send the result."""

    def fold(conn: Connection) -> FoldedPart:
        read_only(conn)
        return fold_part(read_log(conn, part=part), window, beneficiaries, shared=part.first)

    run_part(url, part.index, inbox, outbox, fold)
