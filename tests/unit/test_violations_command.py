"""`minruntime violations` rendering: the table for people and the one JSON document."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from decimal import Decimal

from minruntime.audit.violations import Violation, ViolationReport
from minruntime.commands.violations import render, write_json
from minruntime.core import ProtectionRule, Reclaimers, RuleWindow, Verdict, judge
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
