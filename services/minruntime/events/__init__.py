"""The wire contract (CONTRACT.md §1): CloudEvents envelope, every event type, the codec.

Imports only the standard library, pydantic and ``minruntime.core``. The JSON Schemas in
``schemas/`` are generated from these models (``python -m minruntime.events.schemas``).
"""

from minruntime.events.base import EventData
from minruntime.events.binding import (
    BINARY_HEADER_MAX_BYTES,
    BINARY_MAX_HEADERS,
    Header,
    binary_headers,
    is_binary,
    record_key,
)
from minruntime.events.codec import decode_event, encode_event, new_event, structured_value
from minruntime.events.dead_letter import dead_letter_key, dead_letter_record, decode_dead_letter
from minruntime.events.envelope import (
    DATA_MODELS,
    EVENT_CLASSES,
    EVENT_TYPES,
    INPUT_DATA_MODELS,
    Event,
    EventType,
)
from minruntime.events.inputs import (
    ConfigUpdatedData,
    NodeDeletedData,
    NodeUpsertedData,
    PodGroupAllocatedData,
    PodGroupAnnotatedData,
    PodGroupDeletedData,
    PodGroupReleasedData,
    PodGroupSubmittedData,
    QueueDeletedData,
    QueueUpsertedData,
    RequeueAbandonedData,
    RequeueCheckpointData,
    RequeueNominatedData,
)
from minruntime.events.outputs import (
    PromisedPod,
    ProtectionExpiredData,
    RequeueCommittedData,
    RequeueRolledBackData,
    RequeueSkippedData,
    UncommittedDecisionData,
)
from minruntime.events.rejection import BAD_BINARY_HEADERS, REJECTION_KINDS, EventRejected
from minruntime.events.topics import (
    DEAD_LETTER_TOPIC,
    DEFAULT_TOPICS,
    INPUT_ROLES,
    QUEUES_TOPIC,
    ROLE_TYPES,
    TOPIC_TYPES,
    topic_types,
)

__all__ = [
    "BAD_BINARY_HEADERS",
    "BINARY_HEADER_MAX_BYTES",
    "BINARY_MAX_HEADERS",
    "DATA_MODELS",
    "DEAD_LETTER_TOPIC",
    "DEFAULT_TOPICS",
    "EVENT_CLASSES",
    "EVENT_TYPES",
    "INPUT_DATA_MODELS",
    "INPUT_ROLES",
    "QUEUES_TOPIC",
    "REJECTION_KINDS",
    "ROLE_TYPES",
    "TOPIC_TYPES",
    "ConfigUpdatedData",
    "Event",
    "EventData",
    "EventRejected",
    "EventType",
    "Header",
    "NodeDeletedData",
    "NodeUpsertedData",
    "PodGroupAllocatedData",
    "PodGroupAnnotatedData",
    "PodGroupDeletedData",
    "PodGroupReleasedData",
    "PodGroupSubmittedData",
    "PromisedPod",
    "ProtectionExpiredData",
    "QueueDeletedData",
    "QueueUpsertedData",
    "RequeueAbandonedData",
    "RequeueCheckpointData",
    "RequeueCommittedData",
    "RequeueNominatedData",
    "RequeueRolledBackData",
    "RequeueSkippedData",
    "UncommittedDecisionData",
    "binary_headers",
    "dead_letter_key",
    "dead_letter_record",
    "decode_dead_letter",
    "decode_event",
    "encode_event",
    "is_binary",
    "new_event",
    "record_key",
    "structured_value",
    "topic_types",
]
