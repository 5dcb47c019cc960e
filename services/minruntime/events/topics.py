"""Which event types travel on which topic (CONTRACT.md §1).

Topic names are configurable; the contract is stated per *role*. Each event type's role is
in the registry (``envelope.EVENT_TYPES``); ``ROLE_TYPES`` is the same keyed by role,
and ``topic_types(...)`` builds the same
mapping for configured names (pass it to ``decode_event(..., topic_types=...)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from minruntime.events.envelope import EVENT_TYPES, Direction

QUEUES_TOPIC: Final = "kai.queues"
PODGROUPS_TOPIC: Final = "kai.podgroups"
NODES_TOPIC: Final = "kai.nodes"
NOMINATIONS_TOPIC: Final = "kai.nominations"
REQUEUE_DECISIONS_TOPIC: Final = "kai.requeue-decisions"
DEAD_LETTER_TOPIC: Final = "kai.dead-letter"
PROTECTION_TOPIC: Final = "kai.protection"


def _roles(direction: Direction | None = None) -> tuple[str, ...]:
    """The roles of the registry's rows (of one direction), in the registry's order."""
    rows = EVENT_TYPES.values()
    return tuple(dict.fromkeys(r.role for r in rows if direction in (None, r.direction)))


ROLE_TYPES: Final[Mapping[str, frozenset[str]]] = MappingProxyType(
    {
        role: frozenset(name for name, row in EVENT_TYPES.items() if row.role == role)
        for role in _roles()
    }
)
"""Topic role -> the event types a topic of that role carries (from ``EVENT_TYPES``)."""

INPUT_ROLES: Final = _roles("input")
"""The roles of the topics the service reads: queues, podgroups, nodes, nominations."""

DEFAULT_TOPICS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "queues": QUEUES_TOPIC,
        "podgroups": PODGROUPS_TOPIC,
        "nodes": NODES_TOPIC,
        "nominations": NOMINATIONS_TOPIC,
        "requeue_decisions": REQUEUE_DECISIONS_TOPIC,
        "dead_letter": DEAD_LETTER_TOPIC,
        "protection": PROTECTION_TOPIC,
    }
)
"""Topic role -> default topic name."""


def _merged(pairs: list[tuple[str, frozenset[str]]]) -> Mapping[str, frozenset[str]]:
    merged: dict[str, frozenset[str]] = {}
    for topic, types in pairs:
        # Two roles configured onto one topic: the topic carries both sets of types.
        merged[topic] = merged.get(topic, frozenset()) | types
    return MappingProxyType(merged)


def topic_types(names: Mapping[str, str] | None = None) -> Mapping[str, frozenset[str]]:
    """Topic name -> event types, for the default names overridden by ``names`` (role -> name)."""
    unknown = sorted(set(names or {}) - set(DEFAULT_TOPICS))
    if unknown:
        raise KeyError(
            f"unknown topic role(s) {', '.join(unknown)} (known: {', '.join(DEFAULT_TOPICS)})"
        )
    chosen = {**DEFAULT_TOPICS, **(names or {})}
    return _merged([(chosen[role], types) for role, types in ROLE_TYPES.items()])


TOPIC_TYPES: Final = topic_types()
"""Every default topic name that carries events (inputs and outputs) -> its types."""
