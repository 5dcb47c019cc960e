"""The CloudEvents 1.0 envelope (structured JSON mode) and one envelope class per event type."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, Generic, Literal, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator
from pydantic_core import PydanticCustomError

from minruntime.events import inputs, outputs
from minruntime.events.base import EventData
from minruntime.events.types import BoundedName, Timestamp


class EventType(StrEnum):
    """Every event type of CONTRACT.md §1 (a ``str``: compares equal to the wire name)."""

    QUEUE_UPSERTED = "queue.upserted"
    QUEUE_DELETED = "queue.deleted"
    CONFIG_UPDATED = "config.updated"
    PODGROUP_SUBMITTED = "podgroup.submitted"
    PODGROUP_ALLOCATED = "podgroup.allocated"
    PODGROUP_RELEASED = "podgroup.released"
    PODGROUP_ANNOTATED = "podgroup.annotated"
    PODGROUP_DELETED = "podgroup.deleted"
    NODE_UPSERTED = "node.upserted"
    NODE_DELETED = "node.deleted"
    REQUEUE_NOMINATED = "requeue.nominated"
    REQUEUE_ABANDONED = "requeue.abandoned"
    REQUEUE_CHECKPOINT = "requeue.checkpoint"
    REQUEUE_COMMITTED = "requeue.committed"
    REQUEUE_ROLLED_BACK = "requeue.rolled-back"
    REQUEUE_SKIPPED = "requeue.skipped"
    PROTECTION_EXPIRED = "protection.expired"


DataT = TypeVar("DataT", bound=EventData, covariant=True)


class CloudEventAttributes(BaseModel):
    """The context attributes of a CloudEvents 1.0 event; extension attributes are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=True)

    specversion: Literal["1.0"] = "1.0"
    """The CloudEvents version: always "1.0"."""
    id: BoundedName
    """Unique per source: the de-duplication key."""
    source: BoundedName
    """The producer, e.g. kai-scheduler or minruntime."""
    type: str
    """The event type."""
    time: Timestamp
    """When it happened in the cluster (the clock for start times), RFC3339 with an offset."""
    subject: BoundedName
    """The identity of the thing the event is about; also the Kafka record key."""


class RawCloudEvent(CloudEventAttributes):
    """A CloudEvent whose ``data`` is any JSON object: the envelope checked, the data not."""

    data: dict[str, Any]
    """The event's payload, unvalidated."""


class CloudEvent(CloudEventAttributes, Generic[DataT]):
    """A CloudEvents 1.0 event in structured JSON mode whose ``data`` is typed by its type."""

    # Its subclasses are made at run time (``CloudEvent[data]``, ``create_model``): they have
    # no source, so pydantic's search for their fields' docstrings would walk every frame of
    # the import and look each one's module up in ``sys.modules`` (a third of a second of
    # each start) to find none. Their fields' descriptions are inherited, and ``data``'s is
    # given here: the JSON Schemas are the same (``tests/unit/test_events_schemas.py``).
    model_config = ConfigDict(frozen=True, extra="ignore", use_attribute_docstrings=False)

    data: DataT = Field(description="The event's payload; its shape depends on the type.")

    @model_validator(mode="after")
    def _subject_is_the_identity(self) -> CloudEvent[DataT]:
        if self.subject != self.data.subject:
            expected = self.data.subject
            rule = type(self.data).subject_rule
            raise PydanticCustomError(
                "subject_mismatch",
                "{message}",
                {"message": f"subject {self.subject!r} must equal {rule} ({expected!r})"},
            )
        return self


Event: TypeAlias = CloudEvent[EventData]
"""Any decoded event; narrow with ``isinstance(event.data, PodGroupAllocatedData)``."""


def _envelope(event_type: str, data: type[EventData]) -> type[Event]:
    """The envelope class of one type (``QueueUpsertedData`` -> ``QueueUpsertedEvent``)."""
    return create_model(
        data.__name__.removesuffix("Data") + "Event",
        __base__=CloudEvent[data],  # type: ignore[valid-type]
        __module__=__name__,
        type=(Literal[event_type], event_type),  # type: ignore[arg-type]
    )


# One concrete class per type: ``type`` is a literal, so a union of them is discriminated by
# ``type`` inside pydantic-core (one pass over the JSON), and each JSON Schema has a const.
QueueUpsertedEvent = _envelope("queue.upserted", inputs.QueueUpsertedData)
QueueDeletedEvent = _envelope("queue.deleted", inputs.QueueDeletedData)
ConfigUpdatedEvent = _envelope("config.updated", inputs.ConfigUpdatedData)
PodGroupSubmittedEvent = _envelope("podgroup.submitted", inputs.PodGroupSubmittedData)
PodGroupAllocatedEvent = _envelope("podgroup.allocated", inputs.PodGroupAllocatedData)
PodGroupReleasedEvent = _envelope("podgroup.released", inputs.PodGroupReleasedData)
PodGroupAnnotatedEvent = _envelope("podgroup.annotated", inputs.PodGroupAnnotatedData)
PodGroupDeletedEvent = _envelope("podgroup.deleted", inputs.PodGroupDeletedData)
NodeUpsertedEvent = _envelope("node.upserted", inputs.NodeUpsertedData)
NodeDeletedEvent = _envelope("node.deleted", inputs.NodeDeletedData)
RequeueNominatedEvent = _envelope("requeue.nominated", inputs.RequeueNominatedData)
RequeueAbandonedEvent = _envelope("requeue.abandoned", inputs.RequeueAbandonedData)
RequeueCheckpointEvent = _envelope("requeue.checkpoint", inputs.RequeueCheckpointData)
RequeueCommittedEvent = _envelope("requeue.committed", outputs.RequeueCommittedData)
RequeueRolledBackEvent = _envelope("requeue.rolled-back", outputs.RequeueRolledBackData)
RequeueSkippedEvent = _envelope("requeue.skipped", outputs.RequeueSkippedData)
ProtectionExpiredEvent = _envelope("protection.expired", outputs.ProtectionExpiredData)


Direction: TypeAlias = Literal["input", "output"]
"""Whether the service reads an event type from an input topic or writes it."""


@dataclass(frozen=True, slots=True)
class EventTypeInfo:
    """One row of the registry of event types (CONTRACT.md §1, docs/events.md)."""

    name: EventType
    """The wire name (the ``type`` attribute)."""
    event_class: type[Event]
    """Its envelope class (``.data`` typed)."""
    data_model: type[EventData]
    """Its ``data`` model: what a consumer's handlers are registered by."""
    role: str
    """The role of the topic that carries it (``events.topics``: role -> default name)."""
    direction: Direction
    """Read by the service (an input) or written by it (an output)."""


def _row(event_class: type[Event], role: str, direction: Direction) -> EventTypeInfo:
    data_model = event_class.model_fields["data"].annotation
    assert isinstance(data_model, type)
    assert issubclass(data_model, EventData)
    return EventTypeInfo(
        EventType(event_class.model_fields["type"].default),
        event_class,
        data_model,
        role,
        direction,
    )


# The one table of event types; every other view (classes, data models, a topic role's types,
# a consumer's handlers by data model) is derived from it or checked against it by a test.
# Its order is the order rejections list the known types in.
EVENT_TYPES: Final[Mapping[str, EventTypeInfo]] = MappingProxyType(
    {
        str(row.name): row
        for row in (
            _row(QueueUpsertedEvent, "queues", "input"),
            _row(QueueDeletedEvent, "queues", "input"),
            _row(ConfigUpdatedEvent, "queues", "input"),
            _row(PodGroupSubmittedEvent, "podgroups", "input"),
            _row(PodGroupAllocatedEvent, "podgroups", "input"),
            _row(PodGroupReleasedEvent, "podgroups", "input"),
            _row(PodGroupAnnotatedEvent, "podgroups", "input"),
            _row(PodGroupDeletedEvent, "podgroups", "input"),
            _row(NodeUpsertedEvent, "nodes", "input"),
            _row(NodeDeletedEvent, "nodes", "input"),
            _row(RequeueNominatedEvent, "nominations", "input"),
            _row(RequeueAbandonedEvent, "podgroups", "input"),
            _row(RequeueCheckpointEvent, "podgroups", "input"),
            _row(RequeueCommittedEvent, "requeue_decisions", "output"),
            _row(RequeueRolledBackEvent, "requeue_decisions", "output"),
            _row(RequeueSkippedEvent, "requeue_decisions", "output"),
            _row(ProtectionExpiredEvent, "protection", "output"),
        )
    }
)
"""Event type -> its envelope class, data model, topic role and direction."""

EVENT_CLASSES: Final[Mapping[str, type[Event]]] = MappingProxyType(
    {name: row.event_class for name, row in EVENT_TYPES.items()}
)
"""Event type -> its envelope class (``.data`` typed)."""

DATA_MODELS: Final[Mapping[str, type[EventData]]] = MappingProxyType(
    {name: row.data_model for name, row in EVENT_TYPES.items()}
)
"""Event type -> its ``data`` model."""

INPUT_DATA_MODELS: Final = frozenset(
    row.data_model for row in EVENT_TYPES.values() if row.direction == "input"
)
"""The ``data`` models of the input types: every one is applied by the processor."""
