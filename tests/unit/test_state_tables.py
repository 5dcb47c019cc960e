"""``store.schema.state_tables``: built once per schema, and only the recent shadows kept."""

from __future__ import annotations

from minruntime.store.schema import LIVE, SHADOWS_KEPT, state_tables


def test_a_shadows_tables_are_built_once_while_it_is_recent() -> None:
    first = state_tables("minruntime_unit_kept_0_state")
    assert state_tables("minruntime_unit_kept_0_state") is first
    assert state_tables() is LIVE


def test_only_the_most_recent_shadows_tables_are_kept() -> None:
    """A process makes a shadow per answer, each under a new name: what it keeps is bounded."""
    names = [f"minruntime_unit_many_{number}_state" for number in range(3 * SHADOWS_KEPT)]
    built = [state_tables(name) for name in names]
    # The most recent ones are still the same objects; the oldest were let go (built anew).
    assert all(
        state_tables(name) is tables for name, tables in zip(names[-2:], built[-2:], strict=True)
    )
    assert state_tables(names[0]) is not built[0]
    assert state_tables(names[0]).schema == names[0]
    assert state_tables() is LIVE  # the live tables are never let go


def test_a_recently_used_shadow_is_kept_however_many_come_after_it() -> None:
    used = state_tables("minruntime_unit_used_state")
    for number in range(2 * SHADOWS_KEPT):
        state_tables(f"minruntime_unit_after_{number}_state")
        assert state_tables("minruntime_unit_used_state") is used
