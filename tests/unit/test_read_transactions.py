"""Only an exported snapshot's id is ever pasted into SET TRANSACTION SNAPSHOT."""

from __future__ import annotations

from typing import Any, cast

import pytest
from sqlalchemy import Connection

from minruntime.store.read_transactions import import_snapshot


class _Recorder:
    def __init__(self) -> None:
        self.statements: list[str] = []

    def exec_driver_sql(self, statement: str) -> None:
        self.statements.append(statement)


def test_an_exported_snapshot_is_imported() -> None:
    conn = _Recorder()
    import_snapshot(cast(Connection, conn), "00000003-0000001B-1")
    assert conn.statements == ["SET TRANSACTION SNAPSHOT '00000003-0000001B-1'"]


@pytest.mark.parametrize("exported", ["", "1-2'; DROP TABLE x; --", "abc-def", None, 12])
def test_anything_else_is_refused_before_it_reaches_the_database(exported: Any) -> None:
    conn = _Recorder()
    with pytest.raises(ValueError, match="not an exported snapshot"):
        import_snapshot(cast(Connection, conn), exported)
    assert conn.statements == []
