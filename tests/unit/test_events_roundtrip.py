"""decode_event(encode_event(e)) == e for every type (hypothesis), and the decoder's speed."""

from __future__ import annotations

import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.core import MAX_DURATION, format_duration
from minruntime.events import (
    EVENT_CLASSES,
    Event,
    decode_event,
    encode_event,
    new_event,
)
from minruntime.events.types import DURATION_PATTERN, MAX_GPUS_PER_EVENT

# No surrogates (not UTF-8) and no NUL (PostgreSQL cannot store it; the decoder refuses it).
text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=12)
names = text.filter(bool)
durations = st.timedeltas(min_value=timedelta(0), max_value=MAX_DURATION)
# Inputs accept at most MAX_GPUS_PER_EVENT per node or pod (docs/events.md, Bounds).
gpus = st.floats(min_value=0, max_value=MAX_GPUS_PER_EVENT, allow_nan=False, allow_infinity=False)
offsets = st.integers(min_value=-23 * 60 - 59, max_value=23 * 60 + 59).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)
# Years from 1000: the core's format_rfc3339 relies on strftime("%Y"), which does not pad.
times = st.datetimes(
    min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30), timezones=offsets
)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.none() | strategy


def without_none(**fields: Any) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not None}


@st.composite
def checkpointed(draw: st.DrawFn) -> dict[str, Any]:
    """A requeue.checkpoint: ended at or after its request; checkpointedAt iff acknowledged."""
    requested = draw(st.datetimes(min_value=datetime(1000, 1, 2), max_value=datetime(9999, 1, 1)))
    outcome = draw(st.sampled_from(["acknowledged", "timed_out", "gone"]))
    after = draw(st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=1)))
    zone = draw(offsets)
    data = {
        "uid": draw(names),
        "decision": draw(names),
        "outcome": outcome,
        "requestedAt": requested.replace(tzinfo=zone),
        "grace": draw(
            st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(minutes=30))
        ),
        "endedAt": (requested + after).replace(tzinfo=zone),
        "checkpointedAt": requested.replace(tzinfo=zone) if outcome == "acknowledged" else None,
    }
    return without_none(**data)


@st.composite
def submitted(draw: st.DrawFn) -> dict[str, Any]:
    groups = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    pods = draw(st.lists(names, min_size=1, max_size=5, unique=True))
    data = {
        "uid": draw(names),
        "name": draw(names),
        "namespace": draw(names),
        "queue": draw(names),
        "nodePool": draw(optional(names)),
        "priority": draw(st.integers(-(2**31), 2**31 - 1)),
        "preemptible": draw(optional(st.booleans())),
        "subGroups": [
            {"name": group, "minAvailable": draw(st.integers(0, 2**31 - 1))} for group in groups
        ],
        "pods": [
            {"name": pod, "subGroup": draw(st.sampled_from(groups)), "gpu": draw(gpus)}
            for pod in pods
        ],
        "annotations": draw(st.dictionaries(names, text, max_size=3)),
    }
    return without_none(**data)


# A decision that did not commit: rolled back or skipped, the same fields.
not_committed = st.builds(
    dict,
    uid=names,
    nominatedBy=st.lists(names, min_size=1, max_size=3),
    reason=names,
    decidedAt=times,
)

DATA: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "queue.upserted": st.builds(
        without_none,
        name=names,
        parentQueue=optional(names),
        preemptMinRuntime=optional(durations),
        reclaimMinRuntime=optional(durations.map(format_duration)),
    ),
    "queue.deleted": st.builds(dict, name=names),
    "config.updated": st.builds(
        without_none,
        nodePool=optional(names),
        defaultPreemptMinRuntime=optional(durations),
        defaultReclaimMinRuntime=optional(durations),
        reclaimResolveMethod=optional(st.sampled_from(["lca", "queue"])),
        defaultRequeueDelay=optional(durations.filter(bool)),
    ),
    "podgroup.submitted": submitted(),
    "podgroup.allocated": st.builds(
        dict,
        uid=names,
        pods=st.lists(
            st.builds(dict, name=names, node=names),
            min_size=1,
            max_size=4,
            unique_by=lambda pod: pod["name"],
        ),
    ),
    "podgroup.released": st.builds(
        without_none,
        uid=names,
        pods=optional(st.lists(names, min_size=1, max_size=4, unique=True)),
        reason=optional(names),
    ),
    "podgroup.annotated": st.builds(
        dict, uid=names, annotations=st.dictionaries(names, optional(text), max_size=4)
    ),
    "podgroup.deleted": st.builds(dict, uid=names),
    "node.upserted": st.builds(without_none, name=names, nodePool=optional(names), gpu=gpus),
    "node.deleted": st.builds(dict, name=names),
    "requeue.nominated": st.builds(
        without_none, uid=names, nominatedBy=names, reason=optional(names)
    ),
    "requeue.committed": st.builds(
        dict,
        uid=names,
        nominatedBy=st.lists(names, min_size=1, max_size=3),
        beneficiaries=st.lists(names, min_size=1, max_size=3),
        requeueNotBefore=times,
        decidedAt=times,
    ),
    "requeue.abandoned": st.builds(
        without_none,
        uid=names,
        decision=names,
        reason=st.sampled_from(["pdb", "forbidden", "not_found", "api_error", "expired"]),
        nominatedBy=st.lists(names, min_size=1, max_size=3),
        requeueNotBefore=times,
        decidedAt=times,
        deadline=times,
        message=optional(names),
    ),
    "requeue.checkpoint": checkpointed(),
    "requeue.rolled-back": not_committed,
    "requeue.skipped": not_committed,
    "protection.expired": st.builds(
        without_none,
        uid=names,
        queue=optional(names),
        nodePool=names,
        runStart=times,
        rule=st.sampled_from(["preempt", "reclaim"]),
        minRuntime=durations.filter(bool),
        resolvedFrom=optional(names),
        protectedUntil=times,
        reclaimResolveMethod=optional(st.sampled_from(["lca", "queue"])),
        stepDownQueues=optional(st.lists(names, min_size=1, max_size=3)),
    ),
}


@st.composite
def events(draw: st.DrawFn) -> Event:
    event_type = draw(st.sampled_from(sorted(DATA)))
    return new_event(
        event_type,
        draw(DATA[event_type]),
        time=draw(times),
        source=draw(names),
        id=draw(optional(names)),
    )


def test_every_type_has_a_strategy() -> None:
    assert set(DATA) == set(EVENT_CLASSES)


@settings(max_examples=400, deadline=None)
@given(events())
def test_decode_reverses_encode(event: Event) -> None:
    encoded = encode_event(event)
    encoded.decode("utf-8")
    decoded = decode_event(encoded)
    assert decoded == event
    assert type(decoded) is type(event)
    assert encode_event(decoded) == encoded


@settings(max_examples=300, deadline=None)
@given(durations)
def test_written_durations_match_the_schema_pattern(duration: timedelta) -> None:
    assert re.fullmatch(DURATION_PATTERN, format_duration(duration))


TYPICAL_ALLOCATION = (
    b'{"specversion":"1.0","id":"0b8f4c1e-3a55-4c61-9f0e-6c2d1f7a9b10","source":"kai-scheduler",'
    b'"type":"podgroup.allocated","time":"2026-11-21T10:00:00.123456Z",'
    b'"subject":"7d3c5a9e-0b1f-4c2a-9e8d-1a2b3c4d5e6f","data":{'
    b'"uid":"7d3c5a9e-0b1f-4c2a-9e8d-1a2b3c4d5e6f","pods":['
    b'{"name":"train-llm-worker-0","node":"gpu-node-1"},'
    b'{"name":"train-llm-worker-1","node":"gpu-node-1"},'
    b'{"name":"train-llm-worker-2","node":"gpu-node-2"},'
    b'{"name":"train-llm-worker-3","node":"gpu-node-2"}]}}'
)


def test_decode_speed_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """Measured, not asserted (machines differ): see the report line in the test output."""
    decode_event(TYPICAL_ALLOCATION, "kai.podgroups")
    rounds = 20_000
    started = time.perf_counter()
    for _ in range(rounds):
        decode_event(TYPICAL_ALLOCATION, "kai.podgroups")
    elapsed = time.perf_counter() - started
    with capsys.disabled():
        print(
            f"\n[events] decode_event(podgroup.allocated, 4 pods, {len(TYPICAL_ALLOCATION)} B): "
            f"{rounds / elapsed:,.0f} events/s on one core"
        )
