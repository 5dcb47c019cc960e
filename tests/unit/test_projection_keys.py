"""The key ``replay --verify`` joins two sides of a projection on (``checksums.unmatched``)
must pick out at most one row on each side and never be NULL: else a row could be matched
twice, or never, and the comparison would count it wrongly."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from minruntime.store.shadows import PROJECTIONS
from minruntime.store.tables import STATE_SCHEMA, metadata


def _unique_keys(table: sa.Table) -> list[set[str]]:
    keys = [{column.name for column in table.primary_key.columns}]
    keys += [
        {column.name for column in constraint.columns}
        for constraint in table.constraints
        if isinstance(constraint, sa.UniqueConstraint)
    ]
    keys += [{column.name for column in index.columns} for index in table.indexes if index.unique]
    return keys


@pytest.mark.parametrize("name", sorted(PROJECTIONS))
def test_every_projection_key_is_a_unique_key_of_non_null_columns(name: str) -> None:
    table = metadata.tables[f"{STATE_SCHEMA}.{name}"]
    key = PROJECTIONS[name]
    assert set(key) in _unique_keys(table)
    assert not any(table.c[column].nullable for column in key)
