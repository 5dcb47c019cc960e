"""The base class of every event's ``data``: camelCase on the wire, frozen, no unknown fields."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

WIRE_CONFIG: ConfigDict = ConfigDict(
    alias_generator=to_camel,
    validate_by_name=True,
    validate_by_alias=True,
    serialize_by_alias=True,
    frozen=True,
    # A misspelt field (``preemptMinRunTime``) must not silently leave a default in force.
    extra="forbid",
    use_attribute_docstrings=True,
)


class WireModel(BaseModel):
    """A JSON object of the wire contract: camelCase on the wire, snake_case in Python."""

    model_config = WIRE_CONFIG


class EventData(WireModel):
    """The ``data`` object of one event type; ``subject`` is the identity the envelope repeats."""

    # The attribute holding the identity, and how the subject is derived (for messages).
    identity_field: ClassVar[str] = "uid"
    subject_rule: ClassVar[str] = "data.uid"

    @property
    def subject(self) -> str:
        """The CloudEvents ``subject`` (and Kafka record key) an event with this data must carry."""
        return str(getattr(self, self.identity_field))
