"""``mapping.changed_text``: the kept managedFields time, without parsing every entry."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.cluster import mapping
from minruntime.core import format_rfc3339


def _slow(obj: dict[str, Any]) -> str | None:
    changed = mapping.changed_at(obj)
    return None if changed is None else format_rfc3339(changed)


_digits = st.integers(min_value=0, max_value=99).map(lambda n: f"{n:02d}")
_canonical = st.builds(
    lambda y, mo, d, h, mi, s: f"{y:04d}-{mo}-{d}T{h}:{mi}:{s}Z",
    st.sampled_from([1, 999, 2025, 2026, 9999]),
    _digits,
    _digits,
    _digits,
    _digits,
    _digits,
)  # valid and invalid dates, hours, minutes alike
_other = st.sampled_from(
    [
        "2026-11-26T10:00:05.5Z",
        "2026-11-26T10:00:05+01:00",
        "2026-11-26t10:00:05z",
        "2026-11-26 10:00:05Z",
        "2026-11-26T10:00:05",
        "yesterday",
        "",
        "２０２６-11-26T10:00:05Z",
    ]
)
_time = st.one_of(_canonical, _other, st.none(), st.integers())
_entry: st.SearchStrategy[Any] = st.one_of(
    st.fixed_dictionaries({"time": _time}), st.just({}), st.just("not an entry")
)


@settings(max_examples=500)
@given(
    st.lists(_entry, max_size=5),
    st.one_of(st.none(), _canonical, _other),
)
def test_changed_text_is_changed_at_formatted(entries: list[Any], created: str | None) -> None:
    meta: dict[str, Any] = {"uid": "u", "managedFields": entries}
    if created is not None:
        meta["creationTimestamp"] = created
    obj = {"metadata": meta}
    assert mapping.changed_text(obj) == _slow(obj)


def test_the_newest_canonical_time_is_kept_as_it_is_written() -> None:
    obj = {
        "metadata": {
            "creationTimestamp": "2026-11-26T09:00:00Z",
            "managedFields": [
                {"time": "2026-11-26T10:00:09Z"},
                {"time": "2026-13-26T10:00:05Z"},  # no such month: not a time
                {"time": "2026-11-26T10:00:05Z"},
            ],
        }
    }
    assert mapping.changed_text(obj) == "2026-11-26T10:00:09Z"
    assert mapping.changed_text({"metadata": {}}) is None
