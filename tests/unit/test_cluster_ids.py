"""The bridge's event ids and digests, computed without the uuid and json.dumps round trips,
are the very strings those give (an id must never change: a re-sent event is a duplicate)."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.cluster import mapping

NAMESPACE = uuid.UUID("5d0c0b8e-7a44-4f0e-9b55-6b7562652d31")


@settings(max_examples=500, deadline=None)
@given(st.text(), st.text(), st.text(), st.text())
def test_an_event_id_is_the_uuid5_of_its_parts(
    uid: str, transition: str, version: str, content: str
) -> None:
    name = f"{uid}/{transition}/{version}/{content}"
    assert mapping.event_id(uid, transition, version, content) == str(uuid.uuid5(NAMESPACE, name))


def test_an_id_of_before_is_the_id_of_now() -> None:
    assert mapping.event_id("pg-1", "submitted") == "af26655c-7d1c-5356-b872-2343290a2f63"


_JSON: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_a_digest_is_the_sha256_of_the_sorted_compact_json(value: Any) -> None:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    assert mapping.digest(value) == hashlib.sha256(text.encode()).hexdigest()[:16]
