"""The service's error tree (outside the pure core).

Every error a user can cause is a `UserError`: the CLI prints its message on one line and
exits with its `exit_code`, never a traceback. The core's own errors are `ValueError`
subclasses; the CLI treats those the same way.
"""

from __future__ import annotations


class UserError(Exception):
    """An error the user can act on; its message is one line."""

    exit_code = 2


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
