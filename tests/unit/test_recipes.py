"""The forgotten steps of docs/architecture.md's recipes that no other test catches: a planner
reason the contract's pages do not list, a setting no page names."""

from __future__ import annotations

import re

import pytest

from minruntime.core import RequeueReason, SkipReason
from minruntime.settings import Settings
from tests.conftest import ROOT

DOCS = ROOT / "docs"


def unlisted(values: list[str], text: str) -> list[str]:
    """The values `text` does not name in backticks."""
    return [value for value in values if f"`{value}`" not in text]


def test_every_reason_of_the_planner_is_in_the_contracts_list() -> None:
    """`requeue.rolled-back` and `requeue.skipped` carry the reason: docs/events.md lists them."""
    text = (DOCS / "events.md").read_text()
    listed = text.split("Reasons: rolled back", 1)[1].split("\n\n", 1)[0]
    assert unlisted([reason.value for reason in RequeueReason], listed) == []


def test_every_skip_of_the_nominator_is_a_documented_metric_label() -> None:
    text = (DOCS / "requeue-worker.md").read_text()
    metric = "| `kai_requeue_nomination_skipped_total` |"
    (row,) = [line for line in text.splitlines() if line.startswith(metric)]
    reasons = [reason.value for reason in SkipReason]
    assert unlisted(reasons, row) == []
    assert unlisted(reasons, (DOCS / "rule-engine.md").read_text()) == []


# `MINRUNTIME_KAFKA_SASL_MECHANISM`, or a row's shorthand for a sibling: `..._SASL_MECHANISM`.
_NAMED = re.compile(r"(?<![A-Za-z0-9_])(MINRUNTIME|\.\.\.)_([A-Z0-9_]*[A-Z0-9])")


def documented_settings(text: str, fields: list[str]) -> set[str]:
    """The settings `text` names: in full, or as a `..._SUFFIX` shorthand beside a full name
    of the same row that shares the setting's prefix (`MINRUNTIME_TOPIC_QUEUES`, `..._NODES`)."""
    named: set[str] = set()
    for line in text.splitlines():
        found = _NAMED.findall(line)
        full = [name.lower() for prefix, name in found if prefix == "MINRUNTIME"]
        named.update(full)
        for prefix, suffix in found:
            if prefix != "...":
                continue
            for field in fields:
                stem = field.removesuffix(f"_{suffix.lower()}")
                if stem != field and any(name.startswith(f"{stem}_") for name in full):
                    named.add(field)
    return named & set(fields)


def pages() -> str:
    return "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))])


def test_every_setting_is_named_where_its_users_look() -> None:
    fields = list(Settings.model_fields)
    missing = sorted(set(fields) - documented_settings(pages(), fields))
    assert missing == [], "name these as MINRUNTIME_<NAME> in the README's table or a page"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("| `MINRUNTIME_TOPIC_QUEUES`, `..._NODES` | x |", {"topic_queues", "topic_nodes"}),
        ("| `MINRUNTIME_KAFKA_HEAP` | `768m` |", {"kafka_heap"}),
        # A shorthand alone, or beside a name of another prefix, names nothing.
        ("| `..._NODES` |", set()),
        ("| `MINRUNTIME_KAFKA_HEAP`, `..._NODES` |", {"kafka_heap"}),
        ("`MINRUNTIME_NO_SUCH_SETTING`", set()),
    ],
)
def test_the_settings_check_reads_full_names_and_a_rows_shorthand(
    text: str, named: set[str]
) -> None:
    fields = ["topic_queues", "topic_nodes", "kafka_heap", "node_partitions"]
    assert documented_settings(text, fields) == named
