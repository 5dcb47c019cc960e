"""The service's error tree: `UserError` (its root, defined in the pure core) and the errors
outside the core under it.

Every error a user can cause is a `UserError`: the CLI prints its message on one line and
exits with its `exit_code`, never a traceback. Under it too: the core's errors
(`MinRuntimeError`), a rejected event (`events.EventRejected`) and a cluster object that
cannot be translated (`cluster.mapping.ObjectError`). Anything else reaching the CLI is a bug.
Only the core's errors and `EventRejected` are also `ValueError`s (the contract promises it);
the service's own are not, so an `except ValueError` never catches one of them unnamed.
"""

from __future__ import annotations

from minruntime.core.errors import UserError as UserError


class UnknownPodGroupError(UserError):
    """No podgroup with that uid (at that instant, or in the event log)."""


class ConfigError(UserError):
    """A setting the service cannot use (an address libpq refuses, a replication factor the
    cluster cannot give)."""


class StackError(UserError):
    """The local Kafka/PostgreSQL stack cannot be started, stopped or reached."""

    exit_code = 3


class MissingToolError(StackError):
    """A program the stack needs (java, mvn, PostgreSQL binaries) is not installed."""


class PortInUseError(StackError):
    """A port the stack wants to listen on is taken by another process."""


class TopicLifeChangedError(UserError):
    """Stored offsets were read from another life of a topic (recreated, another cluster)."""

    def __init__(self, topic: str, reason: str) -> None:
        self.topic = topic
        self.reason = reason
        super().__init__(reason)


class SchemaNameError(UserError):
    """A shadow schema's name that is not allowed or already taken (`replay --into`)."""


class SnapshotError(UserError):
    """A snapshot request that cannot be met: an empty event log, keeping none."""
