"""`minruntime violations` rendering: the table for people and the one JSON document."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from decimal import Decimal

from minruntime.audit.violations import Violation, ViolationReport
from minruntime.commands.violations import render, write_json
from minruntime.core import (
    Attribution,
    ProtectionRule,
    Reclaimers,
    RuleWindow,
    Verdict,
    format_rfc3339,
    judge,
    judge_exact,
)
from tests.cloudevents import T0

PREEMPT = RuleWindow(ProtectionRule.PREEMPT, Reclaimers.OWN_QUEUE, timedelta(minutes=10), "B")
VIA_C = RuleWindow(
    ProtectionRule.RECLAIM, Reclaimers.BELOW, timedelta(0), "leaf1", lca="C", walk_start="leaf1"
)
UNKNOWN = RuleWindow(ProtectionRule.RECLAIM, Reclaimers.UNKNOWN, timedelta(minutes=2), None)


def violation(uid: str, ran: timedelta) -> Violation:
    judged = judge(T0, T0 + ran, [PREEMPT, VIA_C, UNKNOWN])
    return Violation(
        uid,
        "leaf1",
        "default",
        "preemptible",
        T0,
        T0 + ran,
        "evicted",
        Decimal("2.000000"),
        Decimal("200.000"),
        judged.verdict,
        judged.cut_short,
        judged.rules,
        7,
    )


def report(*violations: Violation) -> ViolationReport:
    return ViolationReport(None, None, 3, violations)


def test_the_table_has_one_line_per_violation_and_one_per_further_rule() -> None:
    lines = render(report(violation("pos", timedelta(seconds=100.4)))).splitlines()
    assert lines[0] == (
        "1 protection violation among 3 runs ended by an eviction: 0 definite, 1 possible"
    )
    assert lines[1].split() == [
        "ENDED", "UID", "QUEUE", "ENDED", "BY", "VERDICT", "RAN", "CUT", "SHORT", "PROTECTED", "BY"
    ]  # fmt: skip
    assert lines[2].split()[:7] == [
        "2026-11-21T10:01:40.4Z", "pos", "leaf1", "evicted", "possible", "1m40s", "8m20s"
    ]  # fmt: skip
    # To the second for people (8m19.6s), the rules that still protected it one per line.
    assert lines[2].endswith("preempt: 10m (queue B), cut 8m20s short")
    assert lines[3].strip() == "reclaim from an unknown queue: 2m (pool default), cut 20s short"
    assert len(lines) == 4
    assert lines[3].index("reclaim") == lines[2].index("preempt")


def test_no_violation_is_one_line() -> None:
    assert render(report()) == (
        "0 protection violations among 3 runs ended by an eviction: 0 definite, 0 possible"
    )


def test_the_json_is_one_document_with_every_rule() -> None:
    out = io.StringIO()
    write_json(report(violation("a", timedelta(seconds=30)), violation("b", timedelta(0))), out)
    document = json.loads(out.getvalue())
    assert {key: document[key] for key in ("evicted_runs", "violations", "possible")} == {
        "evicted_runs": 3,
        "violations": 2,
        "possible": 2,
    }
    first = document["rows"][0]
    assert (first["run_end"], first["ran"], first["cut_short"], first["gpus"]) == (
        "2026-11-21T10:00:30Z",
        30.0,
        570.0,
        2.0,
    )
    assert [(r["reclaimers"], r["protected"], r["cut_short"]) for r in first["rules"]] == [
        ("own-queue", True, 570.0),
        ("below", False, 0.0),
        ("unknown", True, 90.0),
    ]
    empty = io.StringIO()
    write_json(report(), empty)
    assert json.loads(empty.getvalue())["rows"] == []
    assert Verdict(first["verdict"]) is Verdict.POSSIBLE


def test_a_semi_preemptible_core_is_named_as_what_protected_it() -> None:
    # An hour after every window: definite only because the core went (SEMANTICS.md §10).
    late = violation("semi", timedelta(hours=1))._replace(
        preemptibility="semi-preemptible", verdict=Verdict.DEFINITE
    )
    lines = render(report(late)).splitlines()
    assert lines[0].endswith("1 definite, 0 possible")
    assert lines[2].split()[4] == "definite"
    assert lines[2].endswith("semi-preemptible core: never evictable, by any preemptor")
    assert len(lines) == 3


def attributed(uid: str, ran: timedelta, action: str, window: RuleWindow | None) -> Violation:
    attribution = Attribution("event", action, "team/urgent", "leaf3", None)
    exact = judge_exact(window, T0, T0 + ran, attribution)
    return violation(uid, ran)._replace(attribution=attribution, exact=exact)


def test_an_attributed_row_says_who_evicted_and_judges_the_one_rule() -> None:
    violated = attributed("far", timedelta(seconds=100), "reclaim", PREEMPT)
    unguarded = attributed("moved", timedelta(seconds=100), "consolidation", None)
    shown = report(violation("pos", timedelta(seconds=100)), violated, unguarded)
    lines = render(shown).splitlines()
    assert lines[0] == (
        "2 protection violations among 3 runs ended by an eviction: 0 definite, 1 possible,"
        " 1 violated (also listed: 0 honoured, 1 unguarded)"
    )
    far = next(i for i, line in enumerate(lines) if " far " in line)
    assert lines[far].split()[3:7] == ["evicted", "violated", "1m40s", "8m20s"]
    assert lines[far].endswith("evicted by reclaim for team/urgent (queue leaf3) [event]")
    assert lines[far + 1].strip() == "preempt: 10m (queue B), cut 8m20s short"
    moved = next(i for i, line in enumerate(lines) if " moved " in line)
    assert "unguarded" in lines[moved].split()
    assert "not guarded by a minimum runtime" in lines[moved + 1]
    out = io.StringIO()
    write_json(shown, out)
    document = json.loads(out.getvalue())
    assert (document["violations"], document["violated"], document["unguarded"]) == (2, 1, 1)
    rows = {row["uid"]: row for row in document["rows"]}
    # Unattributed rows are as before: no new keys.
    assert "eviction" not in rows["pos"]
    assert rows["far"]["eviction"]["action"] == "reclaim"
    assert (rows["far"]["verdict"], rows["far"]["cut_short"]) == ("violated", 500.0)
    assert rows["moved"]["applied_rule"] is None


def test_a_report_without_attributed_rows_keeps_its_summary_line() -> None:
    head = render(report(violation("pos", timedelta(seconds=100)))).splitlines()[0]
    assert head.endswith("0 definite, 1 possible")


def test_a_checkpointed_run_shows_the_work_lost_since_its_checkpoint() -> None:
    saved = violation("saved", timedelta(seconds=100))._replace(
        last_checkpoint=T0 + timedelta(seconds=70), gpu_seconds_since_checkpoint=Decimal("60.000")
    )
    lines = render(report(saved, violation("plain", timedelta(seconds=100)))).splitlines()
    row = next(i for i, line in enumerate(lines) if " saved " in line)
    plain = next(i for i, line in enumerate(lines) if " plain " in line)
    rest = [line.strip() for line in lines[row + 1 : plain] if line.startswith(" ")]
    assert rest[-1] == (
        f"checkpointed at {format_rfc3339(T0 + timedelta(seconds=70))}:"
        " lost 0.02 of the run's 0.06 GPU-h"
    )
    assert not any("checkpointed" in line for line in lines[plain:])
    out = io.StringIO()
    write_json(report(saved, violation("plain", timedelta(seconds=100))), out)
    rows = {row["uid"]: row for row in json.loads(out.getvalue())["rows"]}
    assert (
        rows["saved"]["gpu_seconds"],
        rows["saved"]["gpu_seconds_since_checkpoint"],
        rows["saved"]["gpu_seconds_lost"],
        rows["saved"]["last_checkpoint"],
    ) == (200.0, 60.0, 60.0, format_rfc3339(T0 + timedelta(seconds=70)))
    # No checkpoint known: the whole run is the work lost.
    assert (
        rows["plain"]["gpu_seconds_since_checkpoint"],
        rows["plain"]["gpu_seconds_lost"],
        rows["plain"]["last_checkpoint"],
    ) == (None, 200.0, None)
