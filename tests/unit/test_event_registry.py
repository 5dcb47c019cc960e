"""One registry of event types (``events.EVENT_TYPES``), and every consumer's handlers by it.

A new event type is one row of the registry; what this file checks is what a forgotten step
of docs/architecture.md's recipe looks like: an input type the processor would refuse
(``Projections.apply``), a row of an audit's story told as a bare type name, a topic the
contract pages do not name. Its schema and example in ``schemas/`` are checked, type by type
of the registry, by tests/unit/test_events_schemas.py; the examples are the events used here.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from minruntime.audit import timeline, timeline_text
from minruntime.events import (
    DEFAULT_TOPICS,
    EVENT_TYPES,
    INPUT_DATA_MODELS,
    INPUT_ROLES,
    ROLE_TYPES,
    Event,
    decode_event,
)
from minruntime.ingest import decisions, podgroups, projection
from tests.conftest import ROOT

EXAMPLES = ROOT / "schemas" / "examples"
EVENTS_PAGE = ROOT / "docs" / "events.md"
INPUT_TYPES = sorted(name for name, row in EVENT_TYPES.items() if row.direction == "input")
DECISION_TYPES = sorted(ROLE_TYPES["requeue_decisions"])

# CONTRACT.md §1 (/work/shared, not in the repository): its input topics and their types, and
# the output topic of the decisions. The registry may add types (docs/events.md lists them),
# never move or drop one of these.
CONTRACT_TOPICS = {
    "kai.queues": ("input", {"queue.upserted", "queue.deleted", "config.updated"}),
    "kai.podgroups": (
        "input",
        {
            "podgroup.submitted",
            "podgroup.allocated",
            "podgroup.released",
            "podgroup.annotated",
            "podgroup.deleted",
        },
    ),
    "kai.nodes": ("input", {"node.upserted", "node.deleted"}),
    "kai.nominations": ("input", {"requeue.nominated"}),
    "kai.requeue-decisions": (
        "output",
        {"requeue.committed", "requeue.rolled-back", "requeue.skipped"},
    ),
}


def example(name: str) -> Event:
    """The schema's example of ``name`` (schemas/examples/<type>.json), decoded."""
    return decode_event((EXAMPLES / f"{name}.json").read_bytes())


def test_the_registry_is_the_one_table() -> None:
    for name, row in EVENT_TYPES.items():
        assert row.name == name
        assert row.event_class.model_fields["type"].default == name
        assert row.event_class.model_fields["data"].annotation is row.data_model
        assert row.role in DEFAULT_TOPICS, name
        assert name in ROLE_TYPES[row.role]
        assert (row.role in INPUT_ROLES) == (row.direction == "input"), name
    # One data model per type: handlers are registered by data model.
    assert len({row.data_model for row in EVENT_TYPES.values()}) == len(EVENT_TYPES)
    assert INPUT_ROLES == ("queues", "podgroups", "nodes", "nominations")


def test_the_registry_agrees_with_the_contract() -> None:
    for topic, (direction, types) in CONTRACT_TOPICS.items():
        for name in types:
            row = EVENT_TYPES[name]
            assert (DEFAULT_TOPICS[row.role], row.direction) == (topic, direction), name


def _topic_table(page: str) -> dict[str, tuple[str, set[str]]]:
    """docs/events.md's "Topics" table: role -> (direction, event types)."""
    section = page.split("\n## Topics\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        found = re.fullmatch(r"`(\w+)`( \(output\))?", cells[0]) if len(cells) == 4 else None
        if found:
            types = set(re.findall(r"`([a-z]+\.[a-z-]+)`", cells[3]))
            rows[found[1]] = ("output" if found[2] else "input", types)
    return rows


def test_the_registry_agrees_with_docs_events_md() -> None:
    page = EVENTS_PAGE.read_text(encoding="utf-8")
    documented = _topic_table(page)
    registered = {
        role: (EVENT_TYPES[min(types)].direction, set(types)) for role, types in ROLE_TYPES.items()
    }
    # The dead-letter topic carries records, not CloudEvents.
    assert documented.pop("dead_letter") == ("output", set())
    assert documented == registered
    # Each input type has its section, which names its topic; the counts the page states.
    headings = re.findall(r"^### (.*)$", page.split("\n## Event types\n", 1)[1], re.M)
    for name in INPUT_TYPES:
        topic = DEFAULT_TOPICS[EVENT_TYPES[name].role]
        assert any(f"`{name}`" in h and f"({topic}," in h for h in headings), name
    stated = re.findall(
        r"\b(?:all|the) (\d+) (?:types|envelope classes)\b|one of the (\d+) \|", page
    )
    assert {int(number) for pair in stated for number in pair if number} == {len(EVENT_TYPES)}
    assert len(stated) == 5


@pytest.mark.parametrize("name", INPUT_TYPES)
def test_every_input_type_is_applied_and_told(name: str) -> None:
    model = EVENT_TYPES[name].data_model
    assert example(name).data.__class__ is model
    # The processor applies it (Projections.apply: an input type without a handler is a bug).
    assert model in projection.HANDLERS
    # An audit tells it: a line of a podgroup's story, a tree change, or never read (nodes).
    told = (timeline_text.TEXTS, timeline_text.TREE_TEXTS, timeline_text.UNTOLD)
    assert sum(model in table for table in told) == 1, name


def test_handlers_are_registered_for_input_types_only() -> None:
    assert set(projection.HANDLERS) == INPUT_DATA_MODELS
    folded = {
        model
        for model, handler in projection.HANDLERS.items()
        if handler in (projection.Projections._fold, projection.Projections._abandon)
    }
    assert set(podgroups.CHANGES) == folded
    assert set(projection.PODGROUP_TYPES) == folded | {EVENT_TYPES["requeue.nominated"].data_model}
    assert set(timeline_text.TREE_TEXTS) == {
        EVENT_TYPES[name].data_model for name in ROLE_TYPES["queues"]
    }


@pytest.mark.parametrize("name", sorted(set(EVENT_TYPES) - set(ROLE_TYPES["nodes"])))
def test_every_story_type_has_its_own_line(name: str) -> None:
    event = example(name)
    if type(event.data) in timeline_text.TREE_TEXTS:
        assert timeline_text.TreeChanges().note(event) != name
    elif name != "protection.expired":  # an output never logged: not in any story
        assert timeline_text.describe_event(event, name) != name
        assert timeline._kind(event) != "other"


@pytest.mark.parametrize("name", DECISION_TYPES)
def test_every_decision_type_has_an_outcome(name: str) -> None:
    event = example(name)
    outcome = decisions.outcome_of(event)
    assert outcome == name.split(".")[1].replace("-", "_")
    row = decisions.decision_row(event)
    assert row["outcome"] == outcome
    told = timeline._decision(event)
    assert told is not None
    assert told.outcome == outcome


def test_the_processor_refuses_an_output_type() -> None:
    event = example("requeue.committed")
    with pytest.raises(TypeError, match="is not a podgroup event"):
        podgroups.podgroup_change(event.data, datetime(2026, 11, 29, tzinfo=UTC))
