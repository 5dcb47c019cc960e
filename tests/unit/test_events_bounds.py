"""The decoder's documented bounds (docs/events.md "Bounds"): each one a rejection of its kind.

Every hostile payload of issue 12 (findings 1, 2 and 4) is refused here, before PostgreSQL,
Python's json module or the requeue worker's arithmetic could choke on it.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.core import parse_rfc3339
from minruntime.core.errors import TimestampOutOfRangeError
from minruntime.events import EventRejected, decode_event, new_event
from minruntime.events.codec import MAX_JSON_DEPTH, json_depth
from minruntime.events.types import (
    MAX_ANNOTATION_KEY,
    MAX_ANNOTATION_VALUE,
    MAX_ANNOTATIONS,
    MAX_GPUS_PER_EVENT,
    MAX_LABEL,
    MAX_NAME,
    MAX_PODS,
    MAX_TEXT,
)
from tests import cloudevents as ce
from tests.unit.test_events_decode import rejected


def queue_event(**attributes: Any) -> dict[str, Any]:
    """queue.upserted of queue "q", with these envelope attributes."""
    return ce.event("queue.upserted", "q", {"name": "q"}, **attributes)


def submitted(uid: str = "pg-1", **data: Any) -> dict[str, Any]:
    """podgroup.submitted of `uid` (its subject too), with these data fields."""
    pods = ["p-0"]
    base = ce.submitted(uid, "leaf", pods, priority=1, name="train", namespace="team-a")
    return ce.with_data(base, **data)


LONG = "x" * 100_000


@pytest.mark.parametrize(
    "document",
    [
        ce.event(
            "queue.upserted", LONG, {"name": LONG}
        ),  # finding 1: a 100,000-character queue name
        queue_event(id=LONG),  # ... an event id
        queue_event(source=LONG),  # ... a source
        ce.event("node.upserted", LONG, {"name": LONG, "gpu": 1}),  # ... a node name
        submitted(LONG),  # ... a podgroup uid (its subject too)
        ce.deleted("u" * (MAX_NAME + 1)),
        submitted(namespace="n" * (MAX_LABEL + 1)),
        submitted(nodePool="n" * (MAX_LABEL + 1)),
        submitted(queue="q" * (MAX_NAME + 1)),
        submitted(pods=[{"name": "p" * (MAX_NAME + 1), "gpu": 1}]),
        submitted(pods=[{"name": f"p{i}", "gpu": 0} for i in range(MAX_PODS + 1)]),
        submitted(subGroups=[{"name": "s" * (MAX_NAME + 1)}]),
        submitted(annotations={"k" * (MAX_ANNOTATION_KEY + 1): "v"}),
        submitted(annotations={"k": "v" * (MAX_ANNOTATION_VALUE + 1)}),
        submitted(annotations={f"k{i}": "v" for i in range(MAX_ANNOTATIONS + 1)}),
        ce.nominated("u", "b" * (MAX_NAME + 1)),
        ce.nominated("u", "b", "r" * 1025),
        ce.allocated("u", ["p"], node=LONG),
        ce.released("u", ["p" * (MAX_NAME + 1)]),
    ],
)
def test_identifiers_and_lists_have_bounds(document: dict[str, Any]) -> None:
    assert rejected(ce.wire(document)).kind == "too_long"


def test_the_bounds_themselves_are_accepted() -> None:
    name = "é" * MAX_NAME  # 2 bytes a character in UTF-8: still within PostgreSQL's index row
    decode_event(
        ce.wire(ce.event("queue.upserted", name, {"name": name}, id="i" * MAX_NAME, source=name))
    )
    decode_event(
        ce.wire(
            submitted(
                namespace="n" * MAX_LABEL,
                annotations={"k" * MAX_ANNOTATION_KEY: "v" * MAX_ANNOTATION_VALUE},
                pods=[{"name": f"p{i}", "gpu": 0} for i in range(MAX_PODS)],
            )
        )
    )
    reason = "r" * MAX_TEXT
    decode_event(ce.wire(ce.nominated("u", "b", reason)))


def test_an_identifier_never_exceeds_the_btree_row_limit() -> None:
    # (source, id) is the widest unique index: 4 bytes a character at most in UTF-8.
    assert 2 * MAX_NAME * 4 + 64 < 2704


def test_nesting_ten_thousand_deep_is_refused_without_recursion() -> None:
    # Finding 1: `[` x 10,000 made the decoder's diagnosis raise RecursionError (exit 70).
    assert rejected(b"[" * 10_000).kind == "too_deep"
    assert rejected(b"[" * 10_000 + b"]" * 10_000).kind == "too_deep"
    assert rejected(ce.wire(queue_event(ext=json.loads("[" * 100 + "]" * 100)))).kind == "too_deep"


def test_nesting_up_to_the_bound_is_accepted() -> None:
    deep = json.loads("[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1))
    decode_event(ce.wire(queue_event(ext=deep)))  # the event object itself is level 1
    too_deep = json.loads("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert rejected(ce.wire(queue_event(ext=too_deep))).kind == "too_deep"


def test_brackets_inside_strings_do_not_count() -> None:
    assert json_depth(b'{"a": "[[[[{{{{\\"[[", "b": [[1]]}') == 3
    decode_event(ce.wire(queue_event(ext="[" * 1000)))


_TRICKY = st.text(alphabet='[]{}"\\ax', max_size=6)
_JSON = st.recursive(
    st.none() | st.integers() | _TRICKY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TRICKY, inner, max_size=3),
)


@given(_JSON, st.booleans())
@settings(max_examples=300, deadline=None)
def test_depth_is_the_json_nesting(value: Any, indent: bool) -> None:
    def depth(item: Any) -> int:
        if isinstance(item, dict):
            return 1 + max((depth(x) for x in item.values()), default=0)
        if isinstance(item, list):
            return 1 + max((depth(x) for x in item), default=0)
        return 0

    text = json.dumps(value, indent=1 if indent else None, ensure_ascii=False)
    assert json_depth(text.encode()) == depth(value)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_are_refused_anywhere(literal: str) -> None:
    # Finding 1: an extension attribute NaN was accepted, then refused by jsonb: a crash loop.
    assert rejected(ce.with_extension(queue_event(), literal)).kind == "not_finite"
    nested = ce.wire(queue_event(ext={"a": [1, "x"]})).replace(b'"x"', literal.encode())
    assert rejected(nested).kind == "not_finite"
    gpu = ce.wire(ce.node("n", 1)).replace(b'"gpu": 1', f'"gpu": {literal}'.encode())
    assert rejected(gpu).kind == "not_finite"


def test_the_words_nan_and_infinity_in_strings_are_fine() -> None:
    decoded = decode_event(ce.wire(ce.queue("NaN-Infinity")))
    assert decoded.subject == "NaN-Infinity"


@pytest.mark.parametrize("gpu", [1e308, MAX_GPUS_PER_EVENT + 0.5, 1e20])
def test_gpu_amounts_above_the_bound_are_out_of_range(gpu: float) -> None:
    # Finding 2: node.upserted gpu 1e308 was accepted and killed the requeue worker.
    node = ce.event("node.upserted", "n", {"name": "n", "gpu": gpu})
    assert rejected(ce.wire(node)).kind == "out_of_range"
    assert rejected(ce.wire(submitted(pods=[{"name": "p", "gpu": gpu}]))).kind == "out_of_range"


def test_gpu_amounts_at_the_bound_are_accepted() -> None:
    node = decode_event(ce.wire(ce.node("n", MAX_GPUS_PER_EVENT)))
    assert node.data.gpu == MAX_GPUS_PER_EVENT  # type: ignore[attr-defined]


def test_a_priority_beyond_int32_is_out_of_range() -> None:
    assert rejected(ce.wire(submitted(priority=2**31))).kind == "out_of_range"


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_timestamps_outside_years_1_to_9999_in_utc_are_out_of_range(text: str) -> None:
    # Finding 4: stored as year 0 / 10000, they broke replay --verify, protection and explain.
    assert rejected(ce.wire(queue_event(time=text))).kind == "out_of_range"
    with pytest.raises(TimestampOutOfRangeError):
        parse_rfc3339(text)
    allocated = ce.allocated("u", ["p"], node="n")
    assert rejected(ce.wire({**allocated, "time": text})).kind == "out_of_range"


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00-01:00", "9999-12-31T23:59:59Z"]
)
def test_the_extreme_timestamps_inside_the_range_are_accepted(text: str) -> None:
    assert decode_event(ce.wire(queue_event(time=text))).time == parse_rfc3339(text)


def test_new_event_refuses_an_out_of_range_datetime() -> None:
    moment = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    with pytest.raises(EventRejected) as caught:
        new_event("queue.upserted", {"name": "q"}, time=moment)
    assert caught.value.kind == "out_of_range"
    assert new_event("queue.upserted", {"name": "q"}, time=datetime(1, 1, 1, tzinfo=UTC))


@given(st.floats(allow_nan=True, allow_infinity=True))
@settings(max_examples=300, deadline=None)
def test_any_gpu_is_accepted_exactly_when_finite_and_in_range(gpu: float) -> None:
    value = json.dumps(ce.event("node.upserted", "n", {"name": "n", "gpu": gpu})).encode()
    if math.isfinite(gpu) and 0 <= gpu <= MAX_GPUS_PER_EVENT:
        assert decode_event(value).data.gpu == gpu  # type: ignore[attr-defined]
    else:
        assert rejected(value).kind in {"not_finite", "out_of_range", "schema_violation"}
