"""`minruntime requeue plan` rendering and its bad input (no database needed).

The decisions are printed from the decision value field by field: a field the planner gains
(another engineer's ``delay_ends_at``, say) shows up in the table and in ``--json`` unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta

import pytest

from minruntime.commands.render import print_json
from minruntime.commands.requeue_plan import describe, render
from minruntime.core import (
    Exclusion,
    ExclusionReason,
    PodPlacement,
    RequeueDecision,
    RequeueOutcome,
    RequeueReason,
    SkipReason,
)
from minruntime.requeue import RequeuePreview
from tests.unit.test_cli import one_error_line

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@dataclass(frozen=True, slots=True, kw_only=True)
class LaterDecision(RequeueDecision):
    """A decision with a field this module's code has never heard of."""

    delay_ends_at: datetime | None = None


def committed() -> RequeueDecision:
    return RequeueDecision(
        uid="v",
        outcome=RequeueOutcome.COMMITTED,
        reason=None,
        nominated_by=("expectedruntime", "proportion"),
        decided_at=NOW,
        beneficiaries=("hi",),
        requeue_not_before=NOW + timedelta(minutes=5),
        reservations={"node-1": 2.0},
        placements=(
            PodPlacement("hi", "hi-0", "node-1", 1.0),
            PodPlacement("hi", "hi-1", "node-1", 1.0),
        ),
        delay_problem="kai.scheduler/requeue-delay '-5m': negative",
        work_at_risk=4 * 3600.0,
        last_checkpoint=NOW - timedelta(hours=1),
    )


def rolled_back(uid: str = "w") -> RequeueDecision:
    return LaterDecision(
        uid=uid,
        outcome=RequeueOutcome.ROLLED_BACK,
        reason=RequeueReason.NO_CONTENDER_FITS,
        nominated_by=("expectedruntime",),
        decided_at=NOW,
        delay_ends_at=NOW + timedelta(minutes=3),
    )


def preview(*decisions: RequeueDecision, skipped: int = 0) -> RequeuePreview:
    return RequeuePreview(
        now=NOW,
        node_pool="pool-a",
        node_pools=("default", "pool-a"),
        overruns={"v": timedelta(hours=1, seconds=5.4), "w": timedelta(minutes=2)},
        skipped={f"s{i}": SkipReason.INVALID_DURATION for i in range(skipped)},
        candidates={d.uid: frozenset(d.nominated_by) for d in decisions},
        decisions=decisions,
        repeated=frozenset({"w"}),
        excluded=(Exclusion("node", "huge", ExclusionReason.INVALID_GPU, "gpu 1e308"),),
        promised={"node-1": 2.0},
    )


def test_the_table_has_a_row_per_decision_its_placements_and_every_other_field() -> None:
    lines = render(preview(committed(), rolled_back(), skipped=7), at=None).splitlines()

    assert lines[0] == (
        "Requeue plan at 2026-11-21T12:00:00Z, on the live state, node pool pool-a "
        "(dry run: nothing written, no lock taken)"
    )
    # At most five uids per skip reason for people (``--json`` has them all).
    assert lines[1] == (
        "not nominated by expectedruntime (invalid_duration): 7: s0, s1, s2, s3, s4 and 2 more"
    )
    assert lines[2].split() == [
        "UID", "OUTCOME", "REASON", "NOMINATED", "BY", "OVERRUN", "WORK", "AT", "RISK",
        "BENEFICIARIES", "COOLDOWN", "UNTIL", "RECORDED",
    ]  # fmt: skip
    assert lines[3].split() == [
        "v", "committed", "-", "expectedruntime,proportion", "1h5s", "4.00", "GPU-h", "hi",
        "2026-11-21T12:05:00Z", "yes",
    ]  # fmt: skip
    detail = lines[3].index("committed")
    assert [line[detail:] for line in lines[4:8]] == [
        "hi/hi-0 -> node-1 (1 GPU)",
        "hi/hi-1 -> node-1 (1 GPU)",
        "delay_problem: kai.scheduler/requeue-delay '-5m': negative",
        "last_checkpoint: 2026-11-21T11:00:00Z",
    ]
    assert lines[8].split() == [
        "w", "rolled_back", "no_contender_fits", "expectedruntime", "2m", "-", "-", "-", "no",
        "(repeat)",
    ]  # fmt: skip
    assert lines[9][detail:] == "delay_ends_at: 2026-11-21T12:03:00Z"
    assert lines[10:] == [
        "the worker would record 1 of 2 decision(s); a repeat of the newest recorded decision "
        "for the same run is not recorded again",
        "promised after the cycle: node-1 2 GPU",
        "left out: node huge (invalid_gpu): gpu 1e308",
    ]


def test_an_as_of_plan_without_candidates_says_so() -> None:
    text = render(preview(), at=NOW)
    assert text.splitlines()[:2] == [
        "Requeue plan at 2026-11-21T12:00:00Z, on the state the service had, node pool pool-a "
        "(dry run: nothing written, no lock taken)",
        "no candidates: the worker would decide nothing",
    ]


def test_json_has_every_field_of_every_decision(capsys: pytest.CaptureFixture[str]) -> None:
    print_json(describe(preview(committed(), rolled_back(), skipped=7), at=NOW))
    document = json.loads(capsys.readouterr().out)

    assert (document["now"], document["state"], document["node_pool"], document["writes"]) == (
        "2026-11-21T12:00:00Z",
        "as_of",
        "pool-a",
        "nothing",
    )
    assert document["nominated"] == [{"uid": "v", "overrun": 3605.4}, {"uid": "w", "overrun": 120}]
    assert len(document["not_nominated"]) == 7
    first, second = document["decisions"]
    assert set(first) == {f.name for f in fields(RequeueDecision)} | {"recorded"}
    assert first["outcome"] == "committed"
    assert first["placements"][0] == {"podgroup": "hi", "pod": "hi-0", "node": "node-1", "gpu": 1.0}
    assert (first["reservations"], first["recorded"]) == ({"node-1": 2.0}, True)
    assert first["requeue_not_before"] == "2026-11-21T12:05:00Z"
    # The work at risk in GPU-seconds, and the checkpoint it is counted from.
    assert (first["work_at_risk"], first["last_checkpoint"]) == (14400.0, "2026-11-21T11:00:00Z")
    assert (second["work_at_risk"], second["last_checkpoint"]) == (None, None)
    assert (second["reason"], second["recorded"]) == ("no_contender_fits", False)
    assert second["delay_ends_at"] == "2026-11-21T12:03:00Z"
    assert document["excluded"] == [
        {"what": "node", "name": "huge", "reason": "invalid_gpu", "detail": "gpu 1e308"}
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--at", "yesterday"], "--at 'yesterday': use RFC3339"),
        (["--at", "now-5"], "--at 'now-5': invalid duration"),
        (["--at", "9999-01-01T00:00:00Z"], "is in the future"),
        (["--node-pool", " "], "--node-pool: the node pool name must not be empty"),
        (["--node-pool", "p" * 64], "--node-pool: a node pool name has at most 63 characters"),
    ],
)
def test_bad_options_are_one_line_before_any_database(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = one_error_line(["requeue", "plan", *args], capsys)
    assert line.startswith("minruntime: error: ")
    assert message in line
