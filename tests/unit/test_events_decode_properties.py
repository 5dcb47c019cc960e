"""decode_event's shortcuts against the plain rules they stand for, over generated input.

The hot path of decoding skips work when it can tell cheaply that nothing is wrong: the name
checks compare the sizes of sets instead of counting names, the bounds scans look for one
byte before a word and a word before a parse, and the RFC3339 range check runs only in the
years where an offset can leave the range. Each test here states the rule plainly (counting,
parsing, converting every time) and checks that decode_event accepts exactly what the rule
accepts, rejecting the rest with the same kind and message; and that what it accepts equals
what the per-type path (the one ``_diagnose`` re-runs to explain a rejection) builds.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event as count_case
from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.core import format_rfc3339, parse_rfc3339
from minruntime.core.errors import TimestampOutOfRangeError
from minruntime.events import EVENT_CLASSES, EventRejected, decode_event
from minruntime.events.codec import _ESCAPED_NUL, MAX_JSON_DEPTH, _finite, json_depth
from tests import cloudevents as ce
from tests.unit.test_events_decode import EXAMPLES

NAMES = st.sampled_from(["a", "b", "c", "default"])


def outcome(value: bytes) -> tuple[str, str] | None:
    """(kind, message) of the rejection, or None when decode_event accepts ``value``."""
    try:
        event = decode_event(value, "kai.podgroups")
    except EventRejected as error:
        return error.kind, error.message
    # Accepted: equal to what the per-type path builds from the same bytes.
    again = EVENT_CLASSES[event.type].model_validate_json(value, by_alias=True, by_name=False)
    assert event == again
    return None


def duplicates(what: str, names: list[str]) -> tuple[str, str] | None:
    repeated = sorted(name for name, count in Counter(names).items() if count > 1)
    if not repeated:
        return None
    return "schema_violation", f"data: duplicate {what} name(s): {', '.join(repeated)}"


def submission_rule(sub_groups: list[str] | None, pods: list[tuple[str, str | None]]) -> Any:
    """The plain rule: subgroup names distinct, then pod names, then every subgroup declared."""
    declared = ["default"] if sub_groups is None else sub_groups
    used = {sub_group or "default" for _, sub_group in pods}
    undeclared = sorted(used - set(declared))
    return (
        duplicates("subgroup", declared)
        or duplicates("pod", [name for name, _ in pods])
        or (
            (
                "schema_violation",
                f"data: pods name undeclared subgroup(s) {', '.join(undeclared)}; "
                f"subGroups declares {', '.join(sorted(set(declared)))}",
            )
            if undeclared
            else None
        )
    )


@given(
    st.none() | st.lists(NAMES, min_size=1, max_size=5),
    st.lists(st.tuples(NAMES, st.none() | NAMES), min_size=1, max_size=6),
)
@settings(max_examples=400, deadline=None)
def test_submissions_are_refused_exactly_as_the_name_rules_say(
    sub_groups: list[str] | None, pods: list[tuple[str, str | None]]
) -> None:
    data: dict[str, Any] = {
        "uid": "pg-1",
        "name": "train",
        "namespace": "team-a",
        "queue": "leaf",
        "priority": 1,
        "pods": [
            {"name": name, "gpu": 1, **({} if sub_group is None else {"subGroup": sub_group})}
            for name, sub_group in pods
        ],
    }
    if sub_groups is not None:
        data["subGroups"] = [{"name": name} for name in sub_groups]
    value = json.dumps(ce.event("podgroup.submitted", "pg-1", data)).encode()
    expected = submission_rule(sub_groups, pods)
    count_case("accepted" if expected is None else expected[1].split(" name")[0])
    assert outcome(value) == expected


@given(st.lists(NAMES, min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_allocations_are_refused_exactly_when_a_pod_repeats(pods: list[str]) -> None:
    data = {"uid": "pg-1", "pods": [{"name": name, "node": "n"} for name in pods]}
    value = json.dumps(ce.event("podgroup.allocated", "pg-1", data)).encode()
    assert outcome(value) == duplicates("pod", pods)


@given(st.none() | st.just("absent") | st.lists(NAMES, min_size=1, max_size=6))
@settings(max_examples=200, deadline=None)
def test_releases_are_refused_exactly_when_a_pod_repeats(pods: list[str] | str | None) -> None:
    data: dict[str, Any] = {"uid": "pg-1"}
    if pods != "absent":
        data["pods"] = pods
    value = json.dumps(ce.event("podgroup.released", "pg-1", data)).encode()
    assert outcome(value) == (duplicates("pod", pods) if isinstance(pods, list) else None)


# JSON fragments for extension attributes and strings: the words and escapes the bounds
# scans look for, in and out of strings, and nesting around the depth bound.
_WORDS = ["NaN", "Infinity", "-Infinity", "1.5", "null", '"NaN"', '"Infinity"', '"N I"']
_ESCAPES = ["\\u0000", "\\\\u0000", "\\\\\\u0000", "\\u0041", "\\\\", "u0000", "\\n"]


@st.composite
def hostile_fragment(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["word", "string", "nested"]))
    if kind == "word":
        return draw(st.sampled_from(_WORDS))
    if kind == "string":
        parts = draw(st.lists(st.sampled_from([*_ESCAPES, "NaN", "I", "x"]), max_size=4))
        return '"' + "".join(parts) + '"'
    # The event object is level 1: a fragment of depth MAX_JSON_DEPTH is one too many.
    near = [MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1]
    depth = draw(st.sampled_from(near) | st.integers(min_value=1, max_value=MAX_JSON_DEPTH))
    inner = draw(st.sampled_from(_WORDS))
    return "[" * depth + inner + "]" * depth


@given(
    st.lists(hostile_fragment(), max_size=3),
    st.lists(st.sampled_from([*_ESCAPES, "NaN", "Infinity", "x"]), max_size=3),
)
@settings(max_examples=400, deadline=None)
def test_the_bounds_scans_refuse_exactly_what_the_full_checks_refuse(
    extensions: list[str], name_parts: list[str]
) -> None:
    data = json.dumps({"uid": "pg-1", "reason": "r" + "".join(name_parts)})
    # The reason is spliced in raw: its escapes reach the decoder as written.
    data = data.replace(json.dumps("r" + "".join(name_parts)), '"r' + "".join(name_parts) + '"')
    attributes = "".join(f'"x{i}": {fragment}, ' for i, fragment in enumerate(extensions))
    text = (
        "{" + attributes + '"specversion": "1.0", "id": "e-1", "source": "tests", '
        '"type": "podgroup.released", "time": "2026-11-21T10:00:00Z", "subject": "pg-1", '
        f'"data": {data}' + "}"
    )
    value = text.encode()
    try:
        json.loads(value)
    except ValueError:
        return  # the fragments made invalid JSON (a lone escape): not this test's concern
    # The plain checks, every one on every record, in decode_event's order.
    if json_depth(value) > MAX_JSON_DEPTH:
        expected: str | None = "too_deep"
    elif not _finite(value):
        expected = "not_finite"
    elif _ESCAPED_NUL.search(value):
        expected = "schema_violation"
    else:
        expected = None
    count_case(expected or "accepted")  # --hypothesis-show-statistics: every kind is met
    got = outcome(value)
    assert (None if got is None else got[0]) == expected


@given(
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999999))
    | st.sampled_from([datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59)]),
    st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1),
)
@settings(max_examples=400, deadline=None)
def test_timestamps_are_out_of_range_exactly_when_utc_leaves_years_1_to_9999(
    local: datetime, offset_minutes: int
) -> None:
    moment = local.replace(tzinfo=timezone(timedelta(minutes=offset_minutes)))
    text = moment.isoformat()
    try:
        moment.astimezone(UTC)
    except OverflowError:
        with pytest.raises(TimestampOutOfRangeError):
            parse_rfc3339(text)
        return
    parsed = parse_rfc3339(text)
    assert parsed == moment
    assert parsed.utcoffset() == moment.utcoffset()
    assert format_rfc3339(parsed) == format_rfc3339(moment)


# Every example that is an event (the dead-letter record's example is not one).
EVENT_EXAMPLES = [
    path
    for path in sorted(EXAMPLES.glob("*.json"))
    if json.loads(path.read_bytes()).get("type") in EVENT_CLASSES
]


@pytest.mark.parametrize("path", EVENT_EXAMPLES, ids=lambda path: path.stem)
def test_every_example_decodes_to_what_the_per_type_path_builds(path: Path) -> None:
    value = path.read_bytes()
    event = decode_event(value)
    again = EVENT_CLASSES[event.type].model_validate_json(value, by_alias=True, by_name=False)
    assert event == again
    assert event.data.model_dump() == again.data.model_dump()
    assert event.subject == event.data.subject
