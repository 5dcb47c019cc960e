"""Projection snapshots against the real PostgreSQL (docs/audit.md#snapshots).

A history is applied in steps with the real ``apply_batch``; snapshots are taken between some
steps by the runtime role, as ``minruntime snapshot`` takes them. As-of answers started from a
snapshot must equal the answers of a replay of the whole log up to the same instant — before
the first snapshot, exactly at a snapshot's position, just before it, between and after — and
``replay --verify`` must find every snapshot equal to the replay up to its position, and name
the one a hand changed.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import threading
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.audit import asof
from minruntime.audit import replay as replay_module
from minruntime.audit.asof import state_at
from minruntime.audit.explain import Explainer, UnknownPodGroupError
from minruntime.audit.explain_model import describe
from minruntime.audit.protection import describe_row, protection_table
from minruntime.audit.replay import ReplayReport, replay
from minruntime.audit.snapshots import (
    ACTIVE_BLOCK,
    ACTIVE_LIST,
    SnapshotPolicy,
    due,
    snapshots_in,
    take,
)
from minruntime.cli import main
from minruntime.ingest import apply_batch
from minruntime.ingest.memory import GC_THRESHOLDS
from minruntime.store import event_log, shadows
from minruntime.store import snapshots as stored_snapshots
from minruntime.store.checksums import checksum
from minruntime.store.migrate import MIGRATIONS_DIR
from minruntime.store.schema import LIVE
from minruntime.store.shadows import SNAPSHOTTED, scratch_state
from minruntime.store.snapshots import LogPosition, Snapshot
from minruntime.store.unit import Units
from tests.cloudevents import T0, allocated, queue, released, submitted
from tests.integration.helpers import Feed, execute, rows, scalar
from tests.integration.test_explain_asof import (
    PREEMPTORS,
    RECLAIMERS,
    UIDS,
    afterwards,
    db_now,
    steps,
)

ALWAYS = SnapshotPolicy(every_events=1, every_minutes=60)
NEVER = SnapshotPolicy(every_events=10**9, every_minutes=10**9)
MICROSECOND = timedelta(microseconds=1)


# Snapshots are checked alike by one process and by a replay in parts (each part checks its
# share of each snapshot at its position).
JOBS = pytest.mark.parametrize("jobs", ["1", "3"])


def answers(
    engine: sa.Engine, at: datetime, *, from_snapshot: bool, whole: bool = False
) -> dict[str, Any]:
    """The as-of answers at ``at`` (``whole``: and the checksums of every projection).

    Without ``whole``, restored as the commands restore: ``protection`` names no podgroup,
    ``explain UID`` names UID.
    """
    out: dict[str, Any] = {}
    podgroups: tuple[str, ...] | None = None if whole else ()
    with state_at(Units(engine), at, podgroups=podgroups, from_snapshot=from_snapshot) as unit:
        if whole:
            for table in SNAPSHOTTED:
                out[f"table {table}"] = checksum(unit.connection, unit.state.tables, table)
        for reclaimer in RECLAIMERS:
            table_rows = protection_table(unit, at, reclaimer).rows
            out[f"protection {reclaimer}"] = [describe_row(row) for row in table_rows]
    for uid in UIDS:
        named = None if whole else (uid,)
        with state_at(Units(engine), at, podgroups=named, from_snapshot=from_snapshot) as unit:
            explainer = Explainer(unit, at)
            for preemptor in PREEMPTORS:
                try:
                    answer: Any = describe(explainer.explain(uid, preemptor))
                except UnknownPodGroupError as error:
                    answer = f"error: {error}"
                out[f"explain {uid} {preemptor}"] = answer
    return out


@pytest.fixture
def history(engine: sa.Engine, runtime: sa.Engine, feed: Feed) -> list[datetime]:
    """Four steps and the changes afterwards; snapshots after steps 2 and 3 and at the end.

    Returns instants to ask at: before anything, after each step, and around each snapshot.
    """
    now = db_now(engine)
    instants = [now - timedelta(hours=1)]
    for number, messages in enumerate(steps(now), start=1):
        assert feed.send(*messages).dead_lettered == 0
        instants.append(db_now(engine))
        if number in (2, 3):
            taken = take(Units(runtime), ALWAYS)
            assert taken.snapshot is not None
            # Exactly at its position, and one microsecond before the last entry it holds.
            instants += [taken.snapshot.applied_until, taken.snapshot.applied_until - MICROSECOND]
    assert feed.send(*afterwards(now)).dead_lettered == 0
    instants.append(db_now(engine))
    assert take(Units(runtime), NEVER, force=True).snapshot is not None
    instants.append(db_now(engine))
    return instants


def test_as_of_from_a_snapshot_equals_as_of_by_full_replay(
    engine: sa.Engine, history: list[datetime]
) -> None:
    with engine.connect() as conn:
        stored = snapshots_in(conn)
    assert [snapshot.events for snapshot in stored] == sorted(
        {snapshot.events for snapshot in stored}
    )
    assert len(stored) == 3
    # Some instants precede the first snapshot, some sit exactly on a snapshot's position.
    assert min(history) < stored[0].applied_until
    assert {snapshot.applied_until for snapshot in stored[:2]} <= set(history)
    seen = set()
    for at in history:
        expected = answers(engine, at, from_snapshot=False, whole=True)
        # The whole state restored from a snapshot plus the tail is the replayed state...
        assert answers(engine, at, from_snapshot=True, whole=True) == expected, at
        # ... and the commands' partial restore gives the same answers.
        partial = {key: value for key, value in expected.items() if not key.startswith("table")}
        assert answers(engine, at, from_snapshot=True) == partial, at
        seen.add(json.dumps(expected, sort_keys=True, default=str))
    # The instants really see different states (else equality would prove little).
    assert len(seen) >= 6


def test_an_answer_starts_from_the_newest_snapshot_at_or_before_its_instant(
    engine: sa.Engine, history: list[datetime], monkeypatch: pytest.MonkeyPatch
) -> None:
    with engine.connect() as conn:
        first, second, third = snapshots_in(conn)
    replayed: list[int] = []

    def counting_replay(conn: sa.Connection, entries: Any, **options: Any) -> ReplayReport:
        report = replay(conn, entries, **options)
        replayed.append(report.applied)
        return report

    # The real replay, counted: how many log entries an answer replays on top of its snapshot.
    monkeypatch.setattr(asof, "replay", counting_replay)

    def restored_rows(at: datetime) -> int:
        replayed.clear()
        with state_at(Units(engine), at):
            pass
        (tail,) = replayed
        return tail

    total = scalar(engine, "SELECT count(*) FROM minruntime_state.event_log")
    assert restored_rows(first.applied_until - MICROSECOND) == scalar(
        engine,
        "SELECT count(*) FROM minruntime_state.event_log WHERE applied_at <= :at",
        at=first.applied_until - MICROSECOND,
    )
    assert restored_rows(first.applied_until) == 0
    assert restored_rows(second.applied_until) == 0
    between = max(at for at in history if second.applied_until < at < third.applied_until)
    assert 0 < restored_rows(between) < total


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI in-process, on the scratch database."""
    monkeypatch.setenv("MINRUNTIME_DATABASE_URL", database_url)


@pytest.mark.usefixtures("cli")
@JOBS
def test_verify_checks_every_snapshot_and_names_a_tampered_one(
    engine: sa.Engine, history: list[datetime], capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    code, report = replay_verify(capsys, jobs)
    assert code == 0
    assert [(s["equal"], s["problem"]) for s in report["snapshots"]] == [(True, None)] * 3
    assert all(table["equal"] for s in report["snapshots"] for table in s["tables"])

    # A hand edits one running podgroup's status inside the middle snapshot.
    with engine.begin() as conn:
        snapshot_id, uid, data = conn.execute(
            sa.text(
                "SELECT d.snapshot_id, d.uid, d.document"
                " FROM minruntime_state.projection_snapshot_podgroups d"
                " WHERE d.snapshot_id = (SELECT id FROM minruntime_state.projection_snapshots"
                " ORDER BY log_seq LIMIT 1 OFFSET 1)"
                " AND position('\trunning\t' in convert_from(d.document, 'UTF8')) > 0"
                " ORDER BY d.uid LIMIT 1"
            )
        ).one()
        changed = bytes(data).replace(b"\trunning\t", b"\tfinished\t", 1)
        conn.execute(
            sa.text(
                "UPDATE minruntime_state.projection_snapshot_podgroups SET document = :data"
                " WHERE snapshot_id = :id AND uid = :uid"
            ),
            {"data": changed, "id": snapshot_id, "uid": uid},
        )
    code, report = replay_verify(capsys, jobs)
    assert code == 1
    first, tampered, *later = report["snapshots"]
    assert first["equal"] is True  # taken before the edited document
    assert tampered["id"] == snapshot_id
    assert tampered["equal"] is False
    assert [t["table"] for t in tampered["tables"] if not t["equal"]] == ["podgroup_state"]
    # A later snapshot holds the same document unless the podgroup changed again since.
    for snapshot in later:
        assert [t["table"] for t in snapshot["tables"] if not t["equal"]] in (
            [],
            ["podgroup_state"],
        )
    assert all(check["equal"] for check in report["verify"])  # the live state is fine

    # The text report says which snapshot and which rows.
    capsys.readouterr()
    assert main(["replay", "--verify", "--jobs", jobs]) == 1
    captured = capsys.readouterr()
    assert f"snapshot #{snapshot_id}" in captured.out
    assert "differs in podgroup_state" in captured.out
    assert f"#{snapshot_id}" in captured.err


def replay_verify(capsys: pytest.CaptureFixture[str], jobs: str = "1") -> tuple[int, Any]:
    capsys.readouterr()
    code = main(["replay", "--verify", "--json", "--jobs", jobs])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.usefixtures("cli")
@JOBS
def test_a_snapshot_of_a_position_the_log_does_not_have_is_a_difference(
    engine: sa.Engine, history: list[datetime], capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    execute(
        engine,
        "UPDATE minruntime_state.projection_snapshots SET log_seq = log_seq + 1000"
        " WHERE log_seq = (SELECT min(log_seq) FROM minruntime_state.projection_snapshots)",
    )
    code, report = replay_verify(capsys, jobs)
    assert code == 1
    problems = [s["problem"] for s in report["snapshots"] if s["problem"]]
    assert len(problems) == 1
    assert "no event-log entry has its position" in problems[0]


@pytest.mark.usefixtures("cli")
@JOBS
def test_a_later_snapshot_is_checked_for_what_changed_since_the_one_before_and_its_list(
    engine: sa.Engine, history: list[datetime], capsys: pytest.CaptureFixture[str], jobs: str
) -> None:
    # Checked against the second one, the last snapshot is compared only for the podgroups
    # named in between and the ones it stores documents of. A hand slips it a changed
    # document of a podgroup nothing named since, and drops a podgroup from its list of
    # pending and running ones.
    with engine.connect() as conn:
        _, second, third = snapshots_in(conn)
    with engine.begin() as conn:
        uid, document = conn.execute(
            sa.text(
                "SELECT DISTINCT ON (d.uid) d.uid, d.document"
                " FROM minruntime_state.projection_snapshot_podgroups d"
                " WHERE d.log_seq <= :second AND d.uid NOT IN (SELECT subject"
                " FROM minruntime_state.event_log WHERE seq > :second AND seq <= :third"
                " AND subject IS NOT NULL) ORDER BY d.uid, d.log_seq DESC LIMIT 1"
            ),
            {"second": second.log_seq, "third": third.log_seq},
        ).one()
        lines = bytes(document).splitlines(keepends=True)
        (at,) = [i for i, line in enumerate(lines) if line.startswith(b"podgroup_state\t")]
        fields = lines[at].split(b"\t")
        fields[2] = b"renamed-by-hand"  # the podgroup's name (after the table and the uid)
        lines[at] = b"\t".join(fields)
        conn.execute(
            sa.text(
                "INSERT INTO minruntime_state.projection_snapshot_podgroups"
                " (uid, snapshot_id, log_seq, document) VALUES (:uid, :id, :seq, :document)"
            ),
            {"uid": uid, "id": third.id, "seq": third.log_seq, "document": b"".join(lines)},
        )
        listed = json.loads(
            zlib.decompress(
                conn.execute(
                    sa.text(
                        "SELECT podgroups FROM minruntime_state.projection_snapshots WHERE id = :id"
                    ),
                    {"id": third.id},
                ).scalar_one()
            )
        )
        assert listed, "the last snapshot lists running podgroups"
        conn.execute(
            sa.text(
                "UPDATE minruntime_state.projection_snapshots SET podgroups = :listed"
                " WHERE id = :id"
            ),
            {"listed": zlib.compress(json.dumps(listed[1:]).encode()), "id": third.id},
        )
    code, report = replay_verify(capsys, jobs)
    assert code == 1
    assert [s["equal"] for s in report["snapshots"]] == [True, True, False]
    differing = {t["table"]: t for t in report["snapshots"][2]["tables"] if not t["equal"]}
    assert sorted(differing) == sorted(["podgroup_state", ACTIVE_LIST])
    assert [d["key"] for d in differing["podgroup_state"]["differences"]] == [uid]
    assert [d["key"] for d in differing[ACTIVE_LIST]["differences"]] == [listed[0]]
    assert all(check["equal"] for check in report["verify"])  # the live state is fine


@pytest.mark.usefixtures("cli")
def test_pruning_keeps_the_newest_snapshots_whole(
    engine: sa.Engine, history: list[datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    with engine.connect() as conn:
        _, second, third = snapshots_in(conn)
    documents = "SELECT count(*) FROM minruntime_state.projection_snapshot_podgroups"
    before = scalar(engine, documents)
    expected = {at: answers(engine, at, from_snapshot=False, whole=True) for at in history}

    assert prune_cli(capsys, "3")["removed_snapshots"] == 0  # nothing beyond KEEP
    pruned = prune_cli(capsys, "2")
    assert (pruned["removed_snapshots"], pruned["oldest_kept_id"]) == (1, second.id)
    with engine.connect() as conn:
        assert snapshots_in(conn) == [second, third]
    # The first snapshot stored every podgroup; the ones stored again by the second are gone.
    assert 0 < pruned["removed_documents"] == before - scalar(engine, documents)
    for at in history:
        # Before the second snapshot an answer replays from the start now; the same answers.
        assert answers(engine, at, from_snapshot=True, whole=True) == expected[at], at
    code, report = replay_verify(capsys)
    assert code == 0
    assert [(s["id"], s["equal"]) for s in report["snapshots"]] == [
        (second.id, True),
        (third.id, True),
    ]


def prune_cli(capsys: pytest.CaptureFixture[str], keep: str) -> Any:
    capsys.readouterr()
    assert main(["snapshot", "--prune", keep, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_snapshot_is_due_after_n_entries_or_m_minutes() -> None:
    policy = SnapshotPolicy(every_events=100, every_minutes=30)
    t0 = datetime.fromisoformat("2026-11-25T08:00:00+00:00")
    previous = Snapshot(1, 50, t0, 50, t0)
    assert due(None, LogPosition(0, 0, None), policy, t0) is None
    assert due(None, LogPosition(3, 3, t0), policy, t0) == "no snapshot yet"
    assert due(previous, LogPosition(149, 149, t0), policy, t0 + timedelta(minutes=29)) is None
    assert "100 entries" in str(due(previous, LogPosition(150, 150, t0), policy, t0))
    assert "30 minutes" in str(
        due(previous, LogPosition(51, 51, t0), policy, t0 + timedelta(minutes=30))
    )
    assert due(previous, LogPosition(50, 50, t0), policy, t0 + timedelta(days=1)) is None


def test_a_snapshot_is_due_when_the_tail_costs_more_than_its_bytes() -> None:
    """Spacing by what an answer's tail costs to replay: a few large entries (a gang of
    thousands of pods) are due as soon as many small ones."""
    policy = SnapshotPolicy(every_events=100, every_minutes=30, every_bytes=40_000)
    t0 = datetime.fromisoformat("2026-11-25T08:00:00+00:00")
    previous = Snapshot(1, 50, t0, 50, t0)
    assert due(previous, LogPosition(99, 99, t0, 39_999), policy, t0) is None
    assert due(previous, LogPosition(53, 53, t0, 40_000), policy, t0) == (
        "3 entries of 40,000 bytes since the newest snapshot (every 40,000 bytes)"
    )
    # Without a byte budget, count and minutes alone.
    by_count = SnapshotPolicy(every_events=100, every_minutes=30)
    assert due(previous, LogPosition(53, 53, t0, 10**9), by_count, t0) is None


def test_the_log_position_counts_the_bytes_of_the_tail(engine: sa.Engine, feed: Feed) -> None:
    feed.send(queue("team", preempt="1h"), submitted("a", "team", 1), allocated("a", 1, time=T0))
    with engine.connect() as conn:
        sizes = conn.execute(
            sa.text(
                "SELECT seq, pg_column_size(payload) FROM minruntime_state.event_log ORDER BY seq"
            )
        ).all()
        whole = stored_snapshots.position(conn)
        first_seq = sizes[0][0]
        after_first = stored_snapshots.position(conn, Snapshot(1, first_seq, T0, 1, T0))
    assert whole.bytes == sum(size for _, size in sizes) > 0
    assert after_first.bytes == sum(size for _, size in sizes[1:])
    assert (after_first.events, after_first.seq) == (3, sizes[-1][0])


@pytest.mark.usefixtures("cli")
def test_the_command_takes_one_when_due_and_lists_them(
    engine: sa.Engine,
    feed: Feed,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MINRUNTIME_SNAPSHOT_EVERY_EVENTS", "5")
    now = db_now(engine)
    first, second, *_ = steps(now)

    def command(*argv: str) -> Any:
        capsys.readouterr()
        assert main(["snapshot", *argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    assert command()["taken"] is False  # an empty log
    feed.send(*first)
    taken = command()
    assert taken["taken"] is True
    assert taken["reason"] == "no snapshot yet"
    assert command()["taken"] is False  # nothing new
    feed.send(*second[:2])
    assert command()["taken"] is False  # 2 new entries, fewer than 5, not an hour
    assert command("--force")["reason"] == "forced"
    feed.send(*second[2:])
    listed = command("--list")
    assert [row["events"] for row in listed] == [len(first), len(first) + 2]
    assert command()["taken"] is False
    feed.send(*steps(now)[2])
    assert "entries since the newest snapshot (every 5)" in command()["reason"]
    # By cost: one entry whose payload outweighs the byte budget is enough.
    monkeypatch.setenv("MINRUNTIME_SNAPSHOT_EVERY_BYTES", "100")
    feed.send(queue("by-cost", preempt="1h"))
    reason = command()["reason"]
    assert reason.startswith("1 entries of ")
    assert reason.endswith(" bytes since the newest snapshot (every 100 bytes)")


@pytest.fixture
def batch_in_flight(engine: sa.Engine, feed: Feed) -> Iterator[tuple[sa.Connection, Feed]]:
    """A batch applied to the live log but not committed yet (its transaction is open)."""
    now = db_now(engine)
    first, second, *_ = steps(now)
    feed.send(*first)
    with engine.connect() as conn:
        transaction = conn.begin()
        apply_batch(conn, feed.records(*second), consumer_group=feed.group)
        yield conn, feed
        if transaction.is_active:
            transaction.rollback()


def test_a_snapshot_waits_for_a_batch_in_flight_and_then_holds_it(
    engine: sa.Engine, runtime: sa.Engine, batch_in_flight: tuple[sa.Connection, Feed]
) -> None:
    conn, _ = batch_in_flight
    result: list[Any] = []
    taker = threading.Thread(
        target=lambda: result.append(take(Units(runtime), ALWAYS, lock_timeout="120s"))
    )
    taker.start()
    # The taker waits for the snapshot lock the batch holds shared (seen in pg_locks).
    for _ in range(600):
        waiting = rows(
            engine,
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
        )
        if waiting or not taker.is_alive():
            break
        threading.Event().wait(0.05)
    assert waiting
    assert taker.is_alive()
    conn.commit()
    taker.join(timeout=60)
    (taken,) = result
    assert taken.snapshot is not None
    assert taken.snapshot.log_seq == scalar(
        engine, "SELECT max(seq) FROM minruntime_state.event_log"
    )
    # The first snapshot holds a document of every podgroup, the batch's ones included.
    assert scalar(
        engine,
        "SELECT count(*) FROM minruntime_state.projection_snapshot_podgroups"
        " WHERE snapshot_id = :id",
        id=taken.snapshot.id,
    ) == scalar(engine, "SELECT count(*) FROM minruntime_state.podgroup_state")


ODD_UIDS = ("back\\slash", "tab\there", "new\nline", "plain")


def test_ended_podgroups_with_escaped_uids_come_back_from_their_documents(
    engine: sa.Engine, feed: Feed, runtime: sa.Engine
) -> None:
    """COPY text escapes a uid's backslash, tab and newline: the documents are found by the uid."""
    now = db_now(engine)
    feed.send(queue("q"), *(submitted(uid, "q", 2) for uid in ODD_UIDS))
    feed.send(*(allocated(uid, 2, time=now - timedelta(minutes=5)) for uid in ODD_UIDS))
    feed.send(*(released(uid, time=now - timedelta(minutes=1)) for uid in ODD_UIDS))
    first = take(Units(runtime), ALWAYS).snapshot
    assert first is not None
    # Two of them run again after the snapshot: the tail names them.
    feed.send(*(allocated(uid, 1, time=now) for uid in ODD_UIDS[:2]))
    assert take(Units(runtime), ALWAYS).snapshot is not None
    at = db_now(engine)
    with engine.connect() as conn:
        stored = conn.execute(
            sa.text("SELECT DISTINCT uid FROM minruntime_state.projection_snapshot_podgroups")
        ).scalars()
        assert sorted(stored) == sorted(ODD_UIDS)
    for uid in ODD_UIDS:
        for start in (first.applied_until, at):
            with state_at(Units(engine), start, from_snapshot=False) as unit:
                expected = describe(Explainer(unit, start).explain(uid, None))
            with state_at(Units(engine), start, podgroups=(uid,)) as unit:
                assert describe(Explainer(unit, start).explain(uid, None)) == expected


def test_a_taker_gives_up_rather_than_hold_the_writers_back(
    runtime: sa.Engine, batch_in_flight: tuple[sa.Connection, Feed]
) -> None:
    taken = take(Units(runtime), ALWAYS, lock_timeout="100ms")
    assert taken.snapshot is None
    assert taken.reason == "the log's writers were busy"
    conn, _ = batch_in_flight
    conn.commit()  # the writer was never blocked: its commit goes through
    assert take(Units(runtime), ALWAYS).snapshot is not None


# -- the active block (issue 30 part 4) ---------------------------------------------------------


def _podgroup_rows(conn: sa.Connection, tables: Any, uids: list[str] | None = None) -> list[Any]:
    """Every column of ``tables``' podgroup_state rows (of ``uids``), by uid."""
    where = "" if uids is None else " WHERE uid = ANY(:uids)"
    statement = f"SELECT * FROM {tables.schema}.podgroup_state{where} ORDER BY uid"
    return list(conn.execute(sa.text(statement), {"uids": uids}))


def test_the_active_block_holds_the_active_podgroups_rows_of_their_documents(
    engine: sa.Engine, history: list[datetime]
) -> None:
    """Each snapshot's block is exactly the podgroup_state rows of the podgroups it lists,
    as their documents restore them (every column, bookkeeping too)."""
    with engine.connect() as conn, conn.begin():
        stored = snapshots_in(conn)
        seen = 0
        for snapshot in stored:
            listed = stored_snapshots.active_list(conn, snapshot)
            with (
                scratch_state(conn, SNAPSHOTTED) as documents,
                scratch_state(conn, [stored_snapshots.ACTIVE_BLOCK]) as block,
            ):
                stored_snapshots.restore(conn, snapshot, documents, listed, active=False)
                assert stored_snapshots.active_block(conn, snapshot, block) == len(listed)
                from_documents = _podgroup_rows(conn, documents, listed)
                assert _podgroup_rows(conn, block) == from_documents, snapshot
                seen += len(from_documents)
        assert seen > 0, "the snapshots list running podgroups"


def test_answers_from_a_snapshot_without_a_block_are_the_same(
    engine: sa.Engine, history: list[datetime]
) -> None:
    """A snapshot taken before blocks (none stored) restores the active podgroups from their
    documents: the same answers as with the block and as a replay of the whole log."""
    instants = history[-4:]
    expected = {at: answers(engine, at, from_snapshot=False) for at in instants}
    for at in instants:
        assert answers(engine, at, from_snapshot=True) == expected[at], at
    execute(
        engine,
        "DELETE FROM minruntime_state.projection_snapshot_tables WHERE table_name = :block",
        block=stored_snapshots.ACTIVE_BLOCK,
    )
    for at in instants:
        assert answers(engine, at, from_snapshot=True) == expected[at], at


def pruned_while_made(
    engine: sa.Engine, table: sa.TableClause, made: Callable[[sa.Connection, str], Any]
) -> tuple[list[dict[str, Any]], list[int], Callable[[sa.Connection, str], Any]]:
    """(the rows of ``table`` now, the rows deleted at each call, a ``create_shadow`` in their
    place): each call deletes every row of ``table`` and commits, makes the shadow with
    ``made``, then puts the rows back and commits: a prune while an answer is made."""
    with engine.connect() as conn:
        saved = [row._asdict() for row in conn.execute(sa.select(table))]
    deleted: list[int] = []

    def pruned_meanwhile(conn: sa.Connection, name: str) -> Any:
        with engine.begin() as other:
            deleted.append(other.execute(sa.delete(table)).rowcount)
        made_shadow = made(conn, name)
        with engine.begin() as other:
            other.execute(sa.insert(table), saved)
        return made_shadow

    return saved, deleted, pruned_meanwhile


def test_a_tail_longer_than_a_page_restores_every_podgroup_it_names(
    engine: sa.Engine, history: list[datetime], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tail's subjects come from its first page when that is the whole tail; a longer
    tail (pages of two entries here) is asked for its subjects, and the answers stay the
    replay's."""
    expected = {at: answers(engine, at, from_snapshot=False) for at in history}
    monkeypatch.setattr(asof, "PAGE_SIZE", 2)
    monkeypatch.setattr(replay_module, "PAGE_SIZE", 2)
    for at in history:
        assert answers(engine, at, from_snapshot=True) == expected[at], at


def test_the_snapshot_is_read_beside_in_the_answers_database_snapshot(
    engine: sa.Engine, history: list[datetime]
) -> None:
    """The snapshot's stored tables are read on a second connection while the shadow is
    made: in the answer's database snapshot, so tables deleted and committed once the answer
    chose its snapshot (a prune, here while each shadow is made; put back after) are still
    restored, and the answers are the replay's, whole and as the commands restore."""
    instants = history[-3:]
    expected = {
        (at, whole): answers(engine, at, from_snapshot=False, whole=whole)
        for at in instants
        for whole in (False, True)
    }
    table = sa.table(
        "projection_snapshot_tables",
        *(sa.column(name) for name in ("snapshot_id", "table_name", "rows", "columns", "data")),
        schema="minruntime_state",
    )
    saved, deleted, pruned_meanwhile = pruned_while_made(engine, table, shadows.create_shadow)

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(asof, "create_shadow", pruned_meanwhile)
        for at, whole in expected:
            found = answers(engine, at, from_snapshot=True, whole=whole)
            assert found == expected[(at, whole)], (at, whole)
    assert deleted
    assert all(count == len(saved) > 0 for count in deleted)


@pytest.mark.usefixtures("cli")
def test_verify_names_a_block_that_differs_from_the_replay(
    engine: sa.Engine, history: list[datetime], capsys: pytest.CaptureFixture[str]
) -> None:
    with engine.connect() as conn:
        last = snapshots_in(conn)[-1]
    with engine.begin() as conn:
        data = conn.execute(
            sa.text(
                "SELECT data FROM minruntime_state.projection_snapshot_tables"
                " WHERE snapshot_id = :id AND table_name = :block"
            ),
            {"id": last.id, "block": stored_snapshots.ACTIVE_BLOCK},
        ).scalar_one()
        lines = zlib.decompress(data).splitlines(keepends=True)
        assert lines, "the last snapshot has running podgroups"
        fields = lines[0].split(b"\t")
        fields[1] = b"renamed-by-hand"  # the podgroup's name (after its uid)
        uid = fields[0].decode()
        changed = zlib.compress(b"".join([b"\t".join(fields), *lines[1:]]))
        conn.execute(
            sa.text(
                "UPDATE minruntime_state.projection_snapshot_tables SET data = :data"
                " WHERE snapshot_id = :id AND table_name = :block"
            ),
            {"data": changed, "id": last.id, "block": stored_snapshots.ACTIVE_BLOCK},
        )
    code, report = replay_verify(capsys)
    assert code == 1
    assert [s["equal"] for s in report["snapshots"]] == [True, True, False]
    differing = {t["table"]: t for t in report["snapshots"][2]["tables"] if not t["equal"]}
    assert sorted(differing) == [ACTIVE_BLOCK]
    assert [d["key"] for d in differing[ACTIVE_BLOCK]["differences"]] == [uid]


def _read_seqs(engine: sa.Engine, at: datetime, after: int = 0) -> list[int]:
    with engine.connect() as conn:
        return [entry.seq for entry in replay_module.read_log(conn, until=at, after=after)]


def _applied_by(engine: sa.Engine, at: datetime, after: int = 0) -> list[int]:
    """The truth, by a scan of the whole log: the entries after ``after`` applied by ``at``."""
    return [
        int(seq)
        for (seq,) in rows(
            engine,
            "SELECT seq FROM minruntime_state.event_log WHERE seq > :after AND applied_at <= :at"
            " ORDER BY seq",
            after=after,
            at=at,
        )
    ]


@pytest.fixture
def late_writer(engine: sa.Engine, runtime: sa.Engine, feed: Feed) -> dict[str, Any]:
    """A batch whose transaction started before another's and was logged after it, at later
    seqs with an earlier ``applied_at``, between snapshots: S1 | early batch | S2 | late
    batch | S3 | the rest | S4."""
    now = db_now(engine)
    first, second, third, fourth = steps(now)
    feed.send(*first)
    s1 = take(Units(runtime), ALWAYS).snapshot
    with engine.connect() as late:
        late.begin()
        started: datetime = late.execute(sa.text("SELECT now()")).scalar_one()
        threading.Event().wait(0.01)
        feed.send(*second)
        s2 = take(Units(runtime), ALWAYS).snapshot
        apply_batch(late, feed.records(*third), consumer_group=feed.group)
        late.commit()
    s3 = take(Units(runtime), ALWAYS).snapshot
    feed.send(*fourth, *afterwards(now))
    s4 = take(Units(runtime), ALWAYS).snapshot
    assert s1 is not None
    assert s2 is not None
    assert s3 is not None
    assert s4 is not None
    return {"started": started, "snapshots": [s1, s2, s3, s4]}


def test_an_entry_applied_earlier_at_a_later_seq_is_read_by_every_answer(
    engine: sa.Engine, late_writer: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``applied_at`` is a writer's transaction start: the late batch's entries come after the
    early batch's and the snapshot S2 but were applied before them. An answer at an instant
    between the two starts from S1, skips what the snapshots recorded as applied later (the
    early batch, the rest) and still reads the late batch; every read equals a scan of the
    whole log (in pages of two entries too, which cross the skipped spans), and every answer
    a replay of the whole log."""
    s1, s2, s3, s4 = late_writer["snapshots"]
    started: datetime = late_writer["started"]
    with engine.connect() as conn:
        early = list(
            conn.execute(
                sa.text(
                    "SELECT seq FROM minruntime_state.event_log WHERE seq > :after AND seq <= :upto"
                ),
                {"after": s1.log_seq, "upto": s2.log_seq},
            ).scalars()
        )
        late_at = conn.execute(
            sa.text("SELECT min(applied_at) FROM minruntime_state.event_log WHERE seq > :after"),
            {"after": s2.log_seq},
        ).scalar_one()
        recorded = conn.execute(
            sa.text(
                "SELECT since_seq, applied_from FROM minruntime_state.projection_snapshots"
                " ORDER BY log_seq"
            )
        ).all()
    assert late_at == started < s2.applied_until
    assert [since for since, _ in recorded] == [0, s1.log_seq, s2.log_seq, s3.log_seq]
    assert recorded[2].applied_from == started
    between = started + (s2.applied_until - started) / 2
    instants = [started - MICROSECOND, started, between, s2.applied_until - MICROSECOND]
    instants += [s2.applied_until, s3.applied_until, s4.applied_until, db_now(engine)]
    with engine.connect() as conn:
        spans = stored_snapshots.quiet_spans(conn, s1.log_seq, between)
        ranges = event_log.ranges(conn, LIVE, s1.log_seq, between)
    # The early batch and the rest are skipped; the late batch and the log's end are read.
    assert spans == [(s1.log_seq, s2.log_seq), (s3.log_seq, s4.log_seq)]
    assert ranges == [(s2.log_seq, s3.log_seq), (s4.log_seq, None)]
    assert early
    assert not set(early) & set(_applied_by(engine, between))
    for at in instants:
        for after in (0, s1.log_seq, s2.log_seq):
            assert _read_seqs(engine, at, after) == _applied_by(engine, at, after), (at, after)
        assert answers(engine, at, from_snapshot=True) == answers(
            engine, at, from_snapshot=False
        ), at
    monkeypatch.setattr(replay_module, "PAGE_SIZE", 2)
    for at in instants:
        assert _read_seqs(engine, at, s1.log_seq) == _applied_by(engine, at, s1.log_seq), at
    with engine.connect() as conn:
        assert asof.newest_snapshot(conn, between) == s1
        assert event_log.count(conn, LIVE, after=0, until=between) == len(
            _applied_by(engine, between)
        )
        assert event_log.subjects(conn, LIVE, s1.log_seq, between) == {
            str(subject)
            for (subject,) in rows(
                engine,
                "SELECT subject FROM minruntime_state.event_log WHERE seq > :after"
                " AND applied_at <= :at AND subject IS NOT NULL",
                after=s1.log_seq,
                at=between,
            )
        }


def test_the_migration_records_what_a_taker_records(
    engine: sa.Engine, late_writer: dict[str, Any]
) -> None:
    """Migration 0026 fills in the snapshots taken before it as a taker does."""
    path = MIGRATIONS_DIR / "versions" / "0026_snapshot_applied_from.py"
    spec = importlib.util.spec_from_file_location("migration_0026", path)
    assert spec is not None
    assert spec.loader is not None
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    recorded = (
        "SELECT since_seq, applied_from FROM minruntime_state.projection_snapshots ORDER BY log_seq"
    )
    taken = rows(engine, recorded)
    execute(
        engine,
        "UPDATE minruntime_state.projection_snapshots SET since_seq = NULL, applied_from = NULL",
    )
    with engine.begin() as conn:
        conn.exec_driver_sql(migration.BACKFILL)
    assert rows(engine, recorded) == taken


def test_a_shadow_for_an_answer_goes_without_only_the_indexes_no_answer_uses(
    engine: sa.Engine,
) -> None:
    """The shadow an as-of answer is made in has every table, key, unique constraint, view
    and function of a shadow, and every index but ``UNUSED_BY_ANSWERS``."""

    def catalog(conn: sa.Connection, shadow: shadows.Shadow) -> dict[str, set[tuple[str, ...]]]:
        state, read = shadow.state_schema, shadow.read_schema
        found = {
            "relations": "SELECT c.relname, c.relkind::text FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname IN (:state, :read)"
            " AND c.relkind <> 'i'",
            "indexes": "SELECT c.relname, replace(pg_get_indexdef(c.oid), :state, 'S')"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = :state AND c.relkind = 'i'",
            "constraints": "SELECT r.conname, replace(pg_get_constraintdef(r.oid), :state, 'S')"
            " FROM pg_constraint r JOIN pg_namespace n ON n.oid = r.connamespace"
            " WHERE n.nspname = :state",
            "functions": "SELECT p.proname, pg_get_function_identity_arguments(p.oid)"
            " FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname IN (:state, :read)",
        }
        return {
            kind: {
                tuple(str(value) for value in row)
                for row in conn.execute(sa.text(query), {"state": state, "read": read})
            }
            for kind, query in found.items()
        }

    with engine.connect() as conn:
        full = catalog(conn, shadows.create_shadow(conn, "minruntime_asof_full"))
        answer = catalog(conn, asof.create_shadow(conn, "minruntime_asof_answer"))
        conn.rollback()
    assert {name for name, _ in full["indexes"] - answer["indexes"]} == (shadows.UNUSED_BY_ANSWERS)
    assert answer["indexes"] <= full["indexes"]
    for kind in ("relations", "constraints", "functions"):
        assert answer[kind], kind
        assert answer[kind] == full[kind], kind


def test_the_documents_of_the_tails_podgroups_are_read_beside(
    engine: sa.Engine, history: list[datetime]
) -> None:
    """When the snapshot has the active block and the tail is one page, the documents of the
    podgroups restored whole (the named ones and the tail's) are read on the second
    connection while the shadow is made, in the answer's database snapshot (documents deleted
    and committed meanwhile are still restored); the answers are the whole replay's."""
    instants = history[-3:]
    expected = {at: answers(engine, at, from_snapshot=False) for at in instants}
    documents = sa.table(
        "projection_snapshot_podgroups",
        *(sa.column(name) for name in ("uid", "snapshot_id", "log_seq", "document")),
        schema="minruntime_state",
    )
    saved, _, pruned_meanwhile = pruned_while_made(engine, documents, asof.create_shadow)
    read = stored_snapshots.newest_documents
    threads: list[str] = []

    def recorded(conn: sa.Connection, snapshot: Snapshot, uids: Any) -> Any:
        threads.append(threading.current_thread().name)
        return read(conn, snapshot, uids)

    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(asof, "create_shadow", pruned_meanwhile)
        patched.setattr(stored_snapshots, "newest_documents", recorded)
        for at in instants:
            assert answers(engine, at, from_snapshot=True) == expected[at], at
    assert saved
    # One read per answer, each by the reader beside (protection, and explain per uid).
    assert threads
    assert all(name.startswith("minruntime-tail-reader") for name in threads), threads


def test_an_answer_is_made_and_read_with_the_collector_at_the_replays_thresholds(
    engine: sa.Engine, history: list[datetime]
) -> None:
    """Inside ``state_at`` (the shadow made, the tail replayed, the caller's reads) the
    garbage collector runs at ``GC_THRESHOLDS``; as before once the answer is done."""
    before = gc.get_threshold()
    with state_at(Units(engine), history[-2], podgroups=()) as unit:
        assert gc.get_threshold() == GC_THRESHOLDS
        assert protection_table(unit, history[-2]).rows is not None
        assert gc.get_threshold() == GC_THRESHOLDS
    assert gc.get_threshold() == before
