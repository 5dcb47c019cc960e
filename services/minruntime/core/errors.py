"""The root of the one error tree, and the rule engine's errors under it.

`UserError` is what a user did wrong, in the whole service: the command line prints its
message on one line and exits with its `exit_code`, and anything else is a bug that shows its
traceback. It lives here because the core imports nothing of the package;
`minruntime.errors` re-exports it with the service's own errors.

Every rule-engine error is also a ``ValueError`` (the contract promises that to callers, and
pydantic validators turn it into a validation error) and carries a stable, machine-readable
``kind`` that the stream processor copies into dead-letter records, so operators can count and
filter failures without parsing messages.
"""

from __future__ import annotations

from typing import ClassVar


class UserError(Exception):
    """An error the user can act on; its message is one line."""

    exit_code = 2


class MinRuntimeError(UserError, ValueError):
    """Base class of the rule engine's errors: bad input that the caller can correct."""

    kind: ClassVar[str] = "invalid_input"


class InvalidDurationError(MinRuntimeError):
    """A duration string does not follow the grammar of SEMANTICS.md §1."""

    kind: ClassVar[str] = "bad_duration"


class NegativeDurationError(MinRuntimeError):
    """A duration is negative; negative durations are rejected everywhere."""

    kind: ClassVar[str] = "negative_duration"


class InvalidQueueError(MinRuntimeError):
    """A queue definition itself is malformed (e.g. an empty name)."""

    kind: ClassVar[str] = "invalid_queue"


class QueueCycleError(MinRuntimeError):
    """A queue change would make a queue its own ancestor."""

    kind: ClassVar[str] = "queue_cycle"

    def __init__(self, cycle: tuple[str, ...]) -> None:
        self.cycle = cycle
        super().__init__(
            "queue change would create a cycle: "
            + " -> ".join(cycle)
            + "; change the parentQueue of one of these queues"
        )


class DuplicateQueueError(MinRuntimeError):
    """Two queues in one tree share a name."""

    kind: ClassVar[str] = "duplicate_queue"

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"duplicate queue name {name!r}: queue names must be unique")


class InvalidConfigError(MinRuntimeError):
    """A plugin configuration value is not acceptable."""

    kind: ClassVar[str] = "invalid_config"


class InvalidTimestampError(MinRuntimeError):
    """A timestamp is not an RFC3339 time with a UTC offset."""

    kind: ClassVar[str] = "invalid_timestamp"


class TimestampOutOfRangeError(InvalidTimestampError):
    """A timestamp falls outside years 1..9999 once converted to UTC (PostgreSQL and Python
    could store it, but not read it back)."""

    kind: ClassVar[str] = "out_of_range"


class InvalidPodGroupError(MinRuntimeError):
    """A podgroup description is inconsistent (e.g. a pod in an undeclared subgroup)."""

    kind: ClassVar[str] = "invalid_podgroup"
