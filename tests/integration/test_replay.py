"""Replay and verify against the real PostgreSQL: the event log rebuilds the live state exactly.

The live state is made the way the service makes it (``apply_batch`` as the processor,
``run_cycle`` as the requeue worker); the replay rebuilds it in a shadow schema with the same
code, and ``compare`` checks every projection table row by row.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.audit import parallel
from minruntime.audit import replay as replay_module
from minruntime.audit.asof import state_at
from minruntime.audit.parallel import PartFailedError, ReplayInParts
from minruntime.audit.replay import read_log, replay
from minruntime.audit.verify import checksums_beside, compare, compare_schemas
from minruntime.errors import SchemaNameError
from minruntime.store import event_log
from minruntime.store.checksums import checksum, unmatched
from minruntime.store.parts import Part
from minruntime.store.read_transactions import repeatable_read
from minruntime.store.schema import LIVE, StateTables
from minruntime.store.shadows import (
    PROJECTIONS,
    Shadow,
    create_shadow,
    drop_shadow,
    scratch_state,
)
from minruntime.store.unit import Units
from tests.cloudevents import (
    T0,
    Message,
    allocated,
    annotated,
    config,
    deleted,
    event,
    node,
    nominated,
    queue,
    raw,
    released,
    submitted,
    wire,
)
from tests.integration.helpers import NOW, OVERRUN, Feed, cycle, execute, rows, running_job


def on_podgroups(*args: Any, **attributes: Any) -> Message:
    """An evictor's event (requeue.*) on the podgroups topic, where the evictor sends it."""
    document = event(*args, **attributes)
    return Message("kai.podgroups", str(document["subject"]).encode(), wire(document))


def story(feed: Feed, engine: sa.Engine) -> None:
    """Every kind of event and decision the projections know, and one bad event."""
    feed.send(
        queue("root", preempt="30m", reclaim="1h"),
        queue("team", parent="root", preempt="2h"),
        queue("other", parent="root"),
        # A queue of node pool a100 with a queue of no pool below it: seen there differently.
        queue("serving", parent="team", preempt="15m", node_pool="a100"),
        queue("canary", parent="serving"),
        config(defaultPreemptMinRuntime="5m", reclaimResolveMethod="lca"),
        config("a100", defaultReclaimMinRuntime="10m", defaultRequeueDelay="2m"),
        node("node-1", gpu=8),
        node("node-2", gpu=4),
        node("node-3", gpu=1),
        submitted("lonely", "other", 1, priority=1000, annotations=OVERRUN),
        allocated("lonely", 1, time=T0, node="node-3"),
        *running_job("v", 8),
        submitted(
            "elastic",
            "other",
            4,
            priority=10,
            sub_groups=[{"name": "default", "minAvailable": 2}],
        ),
        allocated("elastic", 4, time=T0 + timedelta(minutes=5), node="node-2"),
        raw("kai.podgroups", b"{not json"),
    )
    feed.send(
        submitted(
            "hi", "team", 4, priority=100, sub_groups=[{"name": "default", "minAvailable": 4}]
        ),
        submitted("idle", "other", 1, priority=1),
        nominated("elastic", "proportion"),
        annotated("elastic", {"note": "x"}),
    )
    cycle(engine)  # v committed for hi; lonely rolled back (nothing of higher priority waits)
    feed.send(
        # The evictor asked v for a checkpoint before evicting it (the handshake's end).
        on_podgroups(
            "requeue.checkpoint",
            "v",
            {
                "uid": "v",
                "decision": "d-v",
                "outcome": "timed_out",
                "requestedAt": "2026-11-21T11:00:00Z",
                "grace": "30s",
                "endedAt": "2026-11-21T11:00:30Z",
            },
            NOW + timedelta(seconds=30),
            id="d-v.checkpoint",
            source="minruntime/kube-evictor",
        ),
        released("v", time=NOW + timedelta(minutes=1)),
        # hi, promised v's capacity, is touched while still pending, then allocated: a replay
        # that stops between the two must still end the promise.
        annotated("hi", {"note": "waiting"}),
        allocated("hi", 4, time=NOW + timedelta(minutes=2), node="node-1"),
        queue("team", parent="root", preempt="3h"),  # the tree changes mid-run
        released("elastic", pods=["elastic-0"], time=NOW + timedelta(minutes=3)),
        deleted("idle", time=NOW + timedelta(minutes=4)),
    )
    cycle(engine, NOW + timedelta(minutes=10))


@pytest.fixture
def lived(engine: sa.Engine) -> sa.Engine:
    story(Feed(engine), engine)
    return engine


@pytest.fixture
def replayed(lived: sa.Engine) -> Iterator[tuple[sa.Connection, Shadow]]:
    with repeatable_read(lived) as conn:
        shadow = create_shadow(conn, "replayed")
        report = replay(conn, read_log(conn), into=shadow.tables)
        assert report.rejected == []
        assert report.decisions >= 2
        yield conn, shadow


def test_the_replayed_state_equals_the_live_state_table_by_table(
    replayed: tuple[sa.Connection, Shadow],
) -> None:
    conn, shadow = replayed
    checks = compare(conn, shadow)
    assert [check.table for check in checks] == list(PROJECTIONS)
    assert [check.table for check in checks if not check.equal] == []
    populated = {check.table for check in checks if check.live_rows}
    # The story reaches every projection (else "equal" would prove little); its one promise
    # ended when the beneficiary was allocated (test_requeue_cycle replays a standing one).
    assert populated == set(PROJECTIONS) - {"requeue_promises"}


def test_a_shadow_answers_the_read_surface_like_the_live_schema(
    replayed: tuple[sa.Connection, Shadow],
) -> None:
    conn, shadow = replayed
    at = NOW + timedelta(minutes=30)
    for query in (
        "SELECT * FROM {s}.preempt_protection(:at) ORDER BY uid",
        "SELECT * FROM {s}.reclaim_protection('other', :at) ORDER BY uid",
        # (not updated_at: when a row was written is bookkeeping, not content)
        "SELECT uid, status, start_time, running_pods, is_elastic, requeue_not_before,"
        " awaiting_release, annotations FROM {s}.podgroups ORDER BY uid",
        "SELECT uid, outcome, reason, beneficiaries FROM {s}.requeue_decisions ORDER BY seq",
        "SELECT {s}.is_protected('hi', 'other', :at)",
        "SELECT * FROM {s}.min_runtime_for('team', 'other', 'default')",
    ):
        live = conn.execute(sa.text(query.format(s="minruntime")), {"at": at}).all()
        assert live, query
        assert conn.execute(sa.text(query.format(s=shadow.read_schema)), {"at": at}).all() == live


def test_verify_lists_rows_altered_by_hand(engine: sa.Engine, lived: sa.Engine) -> None:
    execute(
        engine,
        "UPDATE minruntime_state.podgroup_state SET start_time = start_time"
        " - interval '1 hour' WHERE uid = 'hi'",
        "DELETE FROM minruntime_state.node_state WHERE name = 'node-2'",
        "INSERT INTO minruntime_state.nominations (uid, nominated_by, nominated_at)"
        " VALUES ('ghost', 'me', now())",
    )
    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, "tampered")
        replay(conn, read_log(conn), into=shadow.tables)
        checks = {check.table: check for check in compare(conn, shadow)}
    differing = {name for name, check in checks.items() if not check.equal}
    assert differing == {"podgroup_state", "node_state", "nominations"}
    (changed,) = checks["podgroup_state"].differences
    assert changed.key == "hi"
    assert changed.live is not None
    assert changed.replay is not None
    assert changed.live != changed.replay
    (missing,) = checks["node_state"].differences
    assert (missing.key, missing.live, missing.replay is not None) == ("node-2", None, True)
    (ghost,) = checks["nominations"].differences
    assert ghost.key == "ghost/me"
    assert ghost.replay is None


def test_a_subject_column_that_disagrees_with_its_event_does_not_change_the_replay(
    engine: sa.Engine, lived: sa.Engine
) -> None:
    # A replay loads a page's podgroups by the log's subject column before decoding each
    # entry; the event decides what is applied. Subjects altered by hand (or lost) change
    # nothing: the podgroup an event names is loaded when it is applied.
    alter_podgroup_entries(
        engine, "subject = CASE WHEN seq % 2 = 0 THEN 'somebody-else' ELSE NULL END"
    )
    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, "altered_subjects")
        report = replay(conn, read_log(conn), into=shadow.tables)
        assert report.rejected == []
        assert [check.table for check in compare(conn, shadow) if not check.equal] == []


def alter_podgroup_entries(engine: sa.Engine, assignments: str) -> int:
    """``UPDATE ... SET assignments`` on every podgroup entry of the log, by hand; how many."""
    with engine.begin() as conn:
        altered = conn.execute(
            sa.text(
                f"UPDATE minruntime_state.event_log SET {assignments} WHERE type LIKE 'podgroup.%'"
            )
        ).rowcount
    assert altered > 5
    return int(altered)


def url_of(engine: sa.Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


@pytest.mark.parametrize("parts", [2, 3])
def test_a_replay_in_parts_finds_what_one_process_finds(lived: sa.Engine, parts: int) -> None:
    with repeatable_read(lived) as conn:
        shadow = create_shadow(conn, "whole")
        whole = replay(conn, read_log(conn), into=shadow.tables)
        single = compare(conn, shadow)
    with ReplayInParts(url_of(lived), parts, verify=True) as split:
        result = split.run()
    assert (result.report.events, result.report.decisions) == (whole.events, whole.decisions)
    assert result.report.rejected == []
    assert [(c.table, c.live_rows, c.replay_rows, c.equal) for c in result.checks] == [
        (c.table, c.live_rows, c.replay_rows, True) for c in single
    ]


def test_a_replay_in_parts_lists_rows_altered_by_hand(engine: sa.Engine, lived: sa.Engine) -> None:
    with engine.begin() as conn:
        for statement in (
            "UPDATE minruntime_state.podgroup_state SET start_time = start_time"
            " - interval '1 hour' WHERE uid IN ('hi', 'elastic', 'lonely')",
            "DELETE FROM minruntime_state.node_state WHERE name = 'node-2'",
            "DELETE FROM minruntime_state.requeue_decision_log WHERE uid = 'v'",
        ):
            conn.execute(sa.text(statement))
    with ReplayInParts(url_of(engine), 3, verify=True) as split:
        checks = {check.table: check for check in split.run().checks}
    differing = {name for name, check in checks.items() if not check.equal}
    assert differing == {"podgroup_state", "node_state", "requeue_decision_log"}
    # The parts' differences, merged in key order.
    assert [d.key for d in checks["podgroup_state"].differences] == ["elastic", "hi", "lonely"]
    assert checks["podgroup_state"].differing_keys == 3
    assert [d.key for d in checks["node_state"].differences] == ["node-2"]


def test_a_replay_in_parts_lists_the_rejections_one_process_lists(
    engine: sa.Engine, lived: sa.Engine
) -> None:
    """Entries made invalid by hand, across the parts: the same lines, in log order."""
    spoiled = alter_podgroup_entries(engine, "payload = jsonb_set(payload, '{data,uid}', '42')")
    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, "spoiled")
        whole = replay(conn, read_log(conn), into=shadow.tables)
    assert whole.rejected_count == spoiled
    assert whole.rejected_at == sorted(whole.rejected_at)
    with ReplayInParts(url_of(engine), 3, verify=True) as split:
        merged = split.run().report
    assert merged.rejected_count == spoiled
    assert (merged.rejected, merged.rejected_at) == (whole.rejected, whole.rejected_at)


def test_a_part_that_fails_or_dies_is_named(
    lived: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The parts are forked: what is patched here is what they run.
    create_shadow_as_before = parallel.create_shadow

    def create_but_not_in_part_2(conn: sa.Connection, name: str) -> Shadow:
        if "_replay_1_" in name:
            raise ValueError("no room for\na shadow")
        return create_shadow_as_before(conn, name)

    monkeypatch.setattr(parallel, "create_shadow", create_but_not_in_part_2)
    with (
        pytest.raises(
            PartFailedError, match=r"^replay part 2 of 3 failed: ValueError: no room for$"
        ),
        ReplayInParts(url_of(lived), 3, verify=True) as split,
    ):
        split.run()

    def replay_and_die(*args: object, **kwargs: object) -> None:
        os._exit(3)

    monkeypatch.setattr(parallel, "create_shadow", create_shadow_as_before)
    monkeypatch.setattr(parallel, "replay_checked", replay_and_die)
    with (
        pytest.raises(PartFailedError, match=r"stopped \(exit code 3\) before it finished"),
        ReplayInParts(url_of(lived), 2, verify=True) as split,
    ):
        split.run()


def test_replay_is_deterministic_whatever_the_page_and_run_sizes(
    lived: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sums = []
    sizes = [(replay_module.PAGE_SIZE, replay_module.RUN_PODGROUPS), (1, 1), (3, 2), (10**9, 10**9)]
    for page, run in sizes:
        monkeypatch.setattr(replay_module, "PAGE_SIZE", page)
        monkeypatch.setattr(replay_module, "RUN_PODGROUPS", run)
        with repeatable_read(lived) as conn:
            shadow = create_shadow(conn, f"page_{page}_run_{run}")
            report = replay(conn, read_log(conn), into=shadow.tables)
            assert report.rejected == []
            sums.append(
                [(c.table, c.replay_rows, c.replay_checksum) for c in compare(conn, shadow)]
            )
    assert sums[0] == sums[1] == sums[2] == sums[3]


@pytest.mark.parametrize(("page", "run", "every"), [(1, 1, None), (3, 2, None), (2, 10**9, 3)])
def test_a_new_shadow_is_replayed_right_across_written_runs(
    lived: sa.Engine, monkeypatch: pytest.MonkeyPatch, page: int, run: int, every: int | None
) -> None:
    """``new_shadow``: the first run looks no podgroup up (the shadow is empty); once a run is
    written and ended (it holds ``RUN_PODGROUPS``, or a decision comes) the next ones look them
    up again, and a run written and continued at a boundary keeps what it wrote: the live
    state either way."""
    monkeypatch.setattr(replay_module, "PAGE_SIZE", page)
    monkeypatch.setattr(replay_module, "RUN_PODGROUPS", run)
    with repeatable_read(lived) as conn:
        shadow = create_shadow(conn, f"new_{page}_{min(run, 99)}_{every or 0}")
        report = replay(
            conn,
            read_log(conn),
            into=shadow.tables,
            new_shadow=True,
            boundary=None if every is None else (lambda entry: entry.seq % every == 0),
        )
        assert report.rejected == []
        assert [check.table for check in compare(conn, shadow) if not check.equal] == []


def test_the_live_checksums_beside_a_replay_are_those_of_its_snapshot(
    engine: sa.Engine, lived: sa.Engine
) -> None:
    """``checksums_beside``: computed on a second connection, in the caller's database
    snapshot (not in the live state as it is by then), and only of a part's tables."""
    with repeatable_read(lived) as conn:
        before = {table: checksum(conn, LIVE, table)[1] for table in PROJECTIONS}
        execute(engine, "DELETE FROM minruntime_state.node_state WHERE name = 'node-2'")
        with checksums_beside(conn) as computed:
            assert computed() == before
        second = Part(1, 2)
        with checksums_beside(conn, second) as computed:
            assert computed() == {
                table: checksum(conn, LIVE, table, part=second)[1]
                for table in PROJECTIONS
                if second.rows_of(table) is not None
            }
        checks = compare(conn, create_shadow(conn, "beside"), live_checksums=before)
    assert {check.table: check.live_checksum for check in checks} == before


@pytest.mark.parametrize("every", [1, 2, 5])
def test_a_replay_that_stops_to_look_gives_the_same_state(lived: sa.Engine, every: int) -> None:
    # At a boundary the run is written and goes on from what it wrote (its podgroups are not
    # loaded again): whatever the boundaries, the same content as a replay without any.
    sums = []
    looked: list[int] = []
    for boundary in (None, lambda entry: entry.seq % every == 0):
        with repeatable_read(lived) as conn:
            shadow = create_shadow(conn, f"looked_{every}_{len(sums)}")
            report = replay(
                conn,
                read_log(conn),
                into=shadow.tables,
                boundary=boundary,
                after_boundary=lambda entry: looked.append(entry.seq),
            )
            assert report.rejected == []
            sums.append(
                [
                    (c.table, c.replay_rows, c.replay_checksum, c.equal)
                    for c in compare(conn, shadow)
                ]
            )
    assert len(looked) >= 5
    assert sums[0] == sums[1]
    assert all(equal for *_, equal in sums[1])


def test_until_gives_the_state_the_service_had_then(engine: sa.Engine, feed: Feed) -> None:
    feed.send(queue("team", preempt="1h"), submitted("a", "team", 1), allocated("a", 1, time=T0))
    query = "SELECT * FROM {s}.preempt_protection(:at) ORDER BY uid"
    with engine.connect() as conn:
        then = conn.execute(sa.text("SELECT now()")).scalar_one()
        recorded = conn.execute(sa.text(query.format(s="minruntime")), {"at": NOW}).all()
    time.sleep(0.05)
    feed.send(
        queue("team", preempt="4h"),
        submitted("b", "team", 1),
        allocated("b", 1, time=T0),
        released("a", time=T0 + timedelta(hours=1)),
    )
    with state_at(Units(engine), then) as unit:
        conn, shadow = unit.connection, unit.state
        assert conn.execute(sa.text(query.format(s=shadow.read_schema)), {"at": NOW}).all() == (
            recorded
        )
    with state_at(Units(engine), None) as unit:
        conn, shadow = unit.connection, unit.state
        now_rows = conn.execute(sa.text(query.format(s=shadow.read_schema)), {"at": NOW}).all()
    assert [(r.uid, r.min_runtime) for r in now_rows] == [("b", timedelta(hours=4))]


def test_a_kept_shadow_is_readable_by_the_reader_role_and_can_be_dropped(
    lived: sa.Engine, reader: sa.Engine
) -> None:
    with lived.begin() as conn:
        kept = create_shadow(conn, "kept")
        replay(conn, read_log(conn), into=kept.tables)
    try:
        with reader.connect() as conn:
            got = conn.execute(sa.text("SELECT uid FROM kept.preempt_protection(now())")).all()
            assert sorted(r.uid for r in got) == sorted(
                r.uid for r in rows(lived, "SELECT uid FROM minruntime.preempt_protection")
            )
            with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
                conn.execute(sa.text("SELECT * FROM kept_state.podgroup_state"))
    finally:
        with lived.begin() as conn:
            assert drop_shadow(conn, "kept") is True
            assert drop_shadow(conn, "kept") is False


@pytest.mark.parametrize(
    "name", ["minruntime", "Bad", "1x", "pg_x", "a-b", "x" * 60, "minruntime_state"]
)
def test_shadow_names_are_checked(engine: sa.Engine, name: str) -> None:
    with repeatable_read(engine) as conn, pytest.raises(SchemaNameError, match="schema name"):
        create_shadow(conn, name)


def test_an_existing_shadow_is_not_overwritten(engine: sa.Engine) -> None:
    with repeatable_read(engine) as conn:
        create_shadow(conn, "twice")
        with pytest.raises(SchemaNameError, match="already exists"):
            create_shadow(conn, "twice")


def test_replay_refuses_the_live_schema(engine: sa.Engine) -> None:
    with repeatable_read(engine) as conn, pytest.raises(RuntimeError, match="shadow"):
        replay(conn, read_log(conn), into=LIVE)


@contextmanager
def two_sides(
    engine: sa.Engine, table: str, columns: str, values: tuple[str, str]
) -> Iterator[tuple[sa.Connection, StateTables, StateTables]]:
    """Two scratch state schemas in one transaction, ``table`` holding ``values`` (SQL row
    lists, the first side's and the second's) in ``columns``: (connection, first, second)."""
    with (
        engine.begin() as conn,
        scratch_state(conn, [table]) as left,
        scratch_state(conn, [table]) as right,
    ):
        for side, rows_sql in zip((left, right), values, strict=True):
            conn.execute(
                sa.text(f"INSERT INTO {side.schema}.{table} ({columns}) VALUES {rows_sql}")
            )
        yield conn, left, right


def test_sides_are_equal_or_not_by_one_set_operation(engine: sa.Engine) -> None:
    """``unmatched``: rows each side lacks, counted by PostgreSQL (no digest to collide);
    equal sides share one checksum, computed once; unequal ones list their rows."""
    nodes = "('n1', 'default', 8), ('n2', 'default', 4), ('n3', 'a100', 1)"
    with two_sides(engine, "node_state", "name, node_pool, gpu", (nodes, nodes)) as (
        conn,
        left,
        right,
    ):
        assert unmatched(conn, left, right, "node_state") == (3, 3, 0)
        [check] = compare_schemas(conn, left, right, ["node_state"])
        assert check.equal
        assert (
            check.live_checksum == check.replay_checksum == checksum(conn, right, "node_state")[1]
        )
        # 1.0 and 1 are one value (as EXCEPT lists differences): equal, not a text diff.
        conn.execute(sa.text(f"UPDATE {right.schema}.node_state SET gpu = 1.0 WHERE name = 'n3'"))
        assert unmatched(conn, left, right, "node_state") == (3, 3, 0)
        conn.execute(sa.text(f"UPDATE {right.schema}.node_state SET gpu = 2 WHERE name = 'n2'"))
        conn.execute(sa.text(f"DELETE FROM {right.schema}.node_state WHERE name = 'n1'"))
        # n1 only on the left; n2 once on each side with other content.
        assert unmatched(conn, left, right, "node_state") == (3, 2, 3)
        [check] = compare_schemas(conn, left, right, ["node_state"])
        assert not check.equal
        assert check.unmatched_rows == 3
        assert check.replay_checksum != check.live_checksum
        assert [(d.key, d.replay is None) for d in check.differences] == [
            ("n1", True),
            ("n2", False),
        ]


def test_rows_are_matched_on_the_whole_key_and_nulls_are_equal(engine: sa.Engine) -> None:
    """``unmatched`` joins the sides on the projection's key (two columns for pods): a pod
    with the same uid but another name is on one side only; NULL columns on both sides are
    equal, a NULL against a value is not."""
    pods = "('u1', 'p1', 'g', NULL, NULL, FALSE), ('u1', 'p2', 'g', 1, 'n1', TRUE)"
    columns = "uid, name, subgroup, gpu, node, allocated"
    with two_sides(engine, "pod_state", columns, (pods, pods)) as (conn, left, right):
        assert unmatched(conn, left, right, "pod_state") == (2, 2, 0)
        conn.execute(sa.text(f"UPDATE {right.schema}.pod_state SET node = 'n2' WHERE name = 'p1'"))
        assert unmatched(conn, left, right, "pod_state") == (2, 2, 2)
        conn.execute(sa.text(f"UPDATE {right.schema}.pod_state SET node = NULL WHERE name = 'p1'"))
        conn.execute(sa.text(f"UPDATE {right.schema}.pod_state SET name = 'p3' WHERE name = 'p2'"))
        # p2 only on the left, p3 only on the right; p1 equal again.
        assert unmatched(conn, left, right, "pod_state") == (2, 2, 2)
        assert unmatched(conn, left, right, "pod_state", uids=["u2"]) == (0, 0, 0)


def test_rows_equal_as_values_have_one_checksum(engine: sa.Engine) -> None:
    """The checksum hashes each row's values (``hash_record_extended``), not its text: a
    numeric ``1.0`` and ``1`` (one value, as the set operation says) give one checksum; a
    different value another."""
    sides = tuple(f"('n1', 'default', 8), ('n2', 'a100', {gpu})" for gpu in ("1", "1.0"))
    with two_sides(engine, "node_state", "name, node_pool, gpu", (sides[0], sides[1])) as (
        conn,
        left,
        right,
    ):
        assert checksum(conn, left, "node_state") == checksum(conn, right, "node_state")
        conn.execute(sa.text(f"UPDATE {right.schema}.node_state SET gpu = 2 WHERE name = 'n2'"))
        assert checksum(conn, left, "node_state") != checksum(conn, right, "node_state")


def test_the_next_page_of_the_log_is_read_while_this_one_is_applied(
    lived: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader is one page ahead of the caller (the read overlaps the fold), and the
    entries are the same, in the same order, as page by page."""
    monkeypatch.setattr(replay_module, "PAGE_SIZE", 3)
    asked: list[int] = []
    second_read = threading.Event()
    read_page = event_log.read_page

    def recorded(*args: Any, **kwargs: Any) -> list[event_log.LoggedRow]:
        asked.append(kwargs["after"])
        rows = read_page(*args, **kwargs)
        if len(asked) == 2:
            second_read.set()
        return rows

    monkeypatch.setattr(event_log, "read_page", recorded)
    with repeatable_read(lived) as conn:
        entries = read_log(conn)
        first = next(entries)
        # The caller holds the first entry of the first page: the second page is read now.
        assert second_read.wait(10)
        assert asked == [0, asked[1]]
        assert asked[1] > first.seq
        rest = [first, *entries]
        monkeypatch.setattr(event_log, "read_page", read_page)
        monkeypatch.setattr(replay_module, "PAGE_SIZE", 10**9)
        assert [entry.seq for entry in rest] == [entry.seq for entry in read_log(conn)]
    assert len(rest) > 6
