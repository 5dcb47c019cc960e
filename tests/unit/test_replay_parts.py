"""A replay in parts: how many parts by default, and how the parts' findings are merged."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from minruntime.audit import parallel
from minruntime.audit.parallel import default_parts, spare_core
from minruntime.audit.replay import SHOWN_REJECTIONS, ReplayReport
from minruntime.audit.verify import SHOWN_ROWS, RowDifference, TableCheck, merge_parts


@pytest.mark.parametrize(
    ("entries", "cores", "parts"),
    [(0, 16, 1), (19_999, 16, 1), (20_000, 1, 1), (20_000, 2, 2), (10**6, 3, 3), (10**6, 64, 8)],
)
def test_a_long_log_is_split_by_the_cores_at_most_eight(
    monkeypatch: pytest.MonkeyPatch, entries: int, cores: int, parts: int
) -> None:
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _: set(range(cores)))
    assert default_parts(entries) == parts


@pytest.mark.parametrize(
    ("processes", "cores", "spare"), [(1, 1, False), (1, 2, True), (2, 2, False), (3, 8, True)]
)
def test_the_live_checksums_are_computed_beside_only_on_a_spare_core(
    monkeypatch: pytest.MonkeyPatch, processes: int, cores: int, spare: bool
) -> None:
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _: set(range(cores)))
    assert spare_core(processes) is spare


def check(
    table: str, rows: int, sums: str, keys: Sequence[str] = (), live: str | None = None
) -> TableCheck:
    differences = [RowDifference(key, "live", "replayed") for key in keys]
    return TableCheck(table, rows, rows, live or sums, sums, differences, len(keys))


def test_one_part_is_its_own_check_and_parts_add_up() -> None:
    only = check("queue_nodes", 3, "a")
    first, second = check("podgroup_state", 2, "b"), check("podgroup_state", 5, "c")
    merged = merge_parts([[only, first], [second]])
    assert [c.table for c in merged] == ["queue_nodes", "podgroup_state"]
    assert merged[0] is only
    assert (merged[1].live_rows, merged[1].replay_rows, merged[1].equal) == (7, 7, True)
    # Equal parts, equal sides; the split checksum is not one part's.
    assert merged[1].live_checksum == merged[1].replay_checksum not in ("b", "c")


def test_a_differing_part_makes_the_table_differ_with_its_rows_first_in_key_order() -> None:
    many = [f"u{i:03}" for i in range(SHOWN_ROWS + 5)]
    parts = [
        [check("pod_state", 4, "x", keys=many[1::2], live="y")],
        [check("pod_state", 4, "z")],
        [check("pod_state", 4, "w", keys=many[0::2], live="v")],
    ]
    (merged,) = merge_parts(parts)
    assert not merged.equal
    assert merged.differing_keys == len(many)
    assert [d.key for d in merged.differences] == many[:SHOWN_ROWS]


def test_the_reports_add_up_and_list_the_first_rejections_by_seq() -> None:
    one = ReplayReport(events=5, decisions=1, ignored=2, rejected_count=1, batches=2, last_seq=90)
    one.rejected = ["event at seq 40 (podgroup.allocated) is invalid: x"]
    one.rejected_at = [40]
    two = ReplayReport(events=7, decisions=0, rejected_count=2, batches=3, last_seq=99)
    # The order is the lines' seqs, whatever their text says (a batch's line names its last).
    two.rejected = ["event at seq 12 (queue.upserted) is invalid: y", "3 of the 9 records up to"]
    two.rejected_at = [12, 77]
    merged = parallel._merged_report([one, two])
    assert (merged.events, merged.decisions, merged.ignored, merged.batches) == (12, 1, 2, 5)
    assert (merged.rejected_count, merged.last_seq) == (3, 99)
    assert merged.rejected == [two.rejected[0], one.rejected[0], two.rejected[1]]
    assert merged.rejected_at == [12, 40, 77]


def test_only_the_first_rejections_of_all_parts_are_listed() -> None:
    parts = []
    for index in range(3):
        report = ReplayReport(rejected_count=SHOWN_REJECTIONS)
        report.rejected_at = [index + 3 * n for n in range(SHOWN_REJECTIONS)]
        report.rejected = [f"line {seq}" for seq in report.rejected_at]
        parts.append(report)
    merged = parallel._merged_report(parts)
    assert merged.rejected_count == 3 * SHOWN_REJECTIONS
    assert merged.rejected_at == list(range(SHOWN_REJECTIONS))
    assert merged.rejected == [f"line {seq}" for seq in range(SHOWN_REJECTIONS)]
