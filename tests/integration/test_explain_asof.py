"""As-of answers are what the live state said at that time.

Events are applied in steps with the real ``apply_batch``; after each step's commit the live
answers (the protection table for several reclaimers, ``explain`` for several podgroups and
preemptors) are recorded at now = T_i, T_i read from the database clock. Then the tree, the
configuration and the podgroups change. Asking ``--at T_i`` afterwards — through the audit
layer and through the real CLI (``protection --at``, ``explain --at``, ``--json``) — must give
exactly the recorded answers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.audit.asof import state_at
from minruntime.audit.explain import Explainer, UnknownPodGroupError
from minruntime.audit.explain_model import describe
from minruntime.audit.protection import describe_row, protection_table
from minruntime.cli import main
from minruntime.commands.render import print_json
from minruntime.core import format_rfc3339
from minruntime.store.unit import Units
from tests.cloudevents import (
    Event,
    allocated,
    config,
    design_tree,
    queue,
    queue_deleted,
    released,
    submitted,
)
from tests.integration.helpers import Feed, scalar

RECLAIMERS: tuple[str | None, ...] = (None, "leaf3", "leaf1", "nowhere")
UIDS = ("a1", "a3", "aE", "aU", "late", "nope")
PREEMPTORS: tuple[str | None, ...] = (None, "leaf3", "leaf2", "nowhere")
MIN = timedelta(minutes=1)

ToJson = Callable[[Any], Any]


def db_now(engine: sa.Engine) -> datetime:
    moment: datetime = scalar(engine, "SELECT now()")
    return moment


def answers(engine: sa.Engine, state: datetime | None, at: datetime, to_json: ToJson) -> Any:
    """Every answer at ``at``, from the live state (``state`` None) or the state at ``state``."""
    out: dict[str, Any] = {}
    with state_at(Units(engine), state) as unit:
        for reclaimer in RECLAIMERS:
            table = protection_table(unit, at, reclaimer)
            rows = to_json([describe_row(row) for row in table.rows])
            out[f"protection {reclaimer}"] = {"rows": rows, "notes": list(table.notes)}
        explainer = Explainer(unit, at)
        for uid in UIDS:
            for preemptor in PREEMPTORS:
                try:
                    answer = to_json(describe(explainer.explain(uid, preemptor)))
                except UnknownPodGroupError as error:
                    answer = f"error: {error}"
                out[f"explain {uid} {preemptor}"] = answer
    return out


def steps(now: datetime) -> list[list[Event]]:
    """Four steps of cluster history, start times relative to the real clock."""
    return [
        [
            *design_tree(),
            config("default", defaultPreemptMinRuntime="2m", defaultReclaimMinRuntime="90s"),
            submitted("a1", "leaf1", 2),
            allocated("a1", 2, time=now - 20 * MIN),
            submitted("a3", "leaf3", 1),
            allocated("a3", 1, time=now - 2 * MIN),
        ],
        [
            config(
                "default",
                defaultPreemptMinRuntime="30m",
                defaultReclaimMinRuntime="90s",
                reclaimResolveMethod="queue",
            ),
            queue("leaf1", "C", preempt="45m", reclaim="0s"),
            submitted(
                "aE",
                "leaf2",
                4,
                sub_groups=[{"name": "default", "minAvailable": 2}],
            ),
            allocated("aE", ["aE-0", "aE-1", "aE-2"], time=now - 3 * MIN),
            submitted("aU", "nowhere", 1),
            allocated("aU", 1, time=now - 5 * MIN),
        ],
        [
            released("a1", time=now - MIN),
            queue_deleted("D"),
            allocated("aE", ["aE-3"], time=now - MIN),
            queue("nowhere", preempt="1h", reclaim="2h"),
        ],
        [
            allocated("a1", 2, time=now),
            queue("leaf3", "C", reclaim="25m"),
            submitted("late", "leaf2", 1),
        ],
    ]


AFTERWARDS_OFFSET = timedelta(seconds=30)


def afterwards(now: datetime) -> list[Event]:
    """Changes to everything the recorded answers depend on."""
    later = now + AFTERWARDS_OFFSET
    return [
        queue("B", "A", preempt="1s", reclaim="1s"),
        queue_deleted("leaf1"),
        queue("D", "A", reclaim="3h"),
        config("default", reclaimResolveMethod="lca"),
        released("aE", time=later),
        released("a3", time=later),
        allocated("late", 1, time=later),
        submitted("a9", "leaf2", 1),
        allocated("a9", 1, time=later),
    ]


def test_as_of_answers_match_what_the_live_state_said(
    engine: sa.Engine,
    feed: Feed,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def to_json(value: Any) -> Any:
        capsys.readouterr()
        print_json(value)
        return json.loads(capsys.readouterr().out)

    now = db_now(engine)
    recorded: list[tuple[datetime, Any]] = []
    for messages in steps(now):
        assert feed.send(*messages).dead_lettered == 0
        # After the commit: every event of the step has applied_at <= T_i.
        moment = db_now(engine)
        recorded.append((moment, answers(engine, None, moment, to_json)))
    # The steps really changed the answers (otherwise the test below proves nothing).
    assert len({json.dumps(answer, sort_keys=True) for _, answer in recorded}) == len(recorded)

    assert feed.send(*afterwards(now)).dead_lettered == 0
    final = db_now(engine)
    live_now = answers(engine, None, final, to_json)

    monkeypatch.setenv("MINRUNTIME_DATABASE_URL", database_url)
    for moment, expected in recorded:
        assert answers(engine, moment, moment, to_json) == expected
        assert live_now != answers(engine, None, moment, to_json) != expected
        at = format_rfc3339(moment)
        for reclaimer in RECLAIMERS:
            extra = [] if reclaimer is None else ["--reclaimer-queue", reclaimer]
            assert (
                cli_json(capsys, "protection", *extra, "--at", at)
                == (expected[f"protection {reclaimer}"])
            )
        for uid in UIDS:
            for preemptor in (None, "leaf3"):
                extra = [] if preemptor is None else ["--preemptor-queue", preemptor]
                assert (
                    cli_json(capsys, "explain", uid, *extra, "--at", at)
                    == (expected[f"explain {uid} {preemptor}"])
                )


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """Run the CLI in-process with --json: the parsed output (and notes), or its error line."""
    capsys.readouterr()
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    if code != 0:
        (line,) = captured.err.strip().splitlines()
        assert line.startswith("minruntime: error: ")
        return line.removeprefix("minruntime: ")
    output = json.loads(captured.out)
    if argv[0] == "protection":
        notes = [line.removeprefix("minruntime: note: ") for line in captured.err.splitlines()]
        return {"rows": output, "notes": notes}
    assert captured.err == ""
    return output
