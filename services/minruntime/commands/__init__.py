"""Every command of the CLI, one function each, in modules named by domain.

``minruntime.cli`` maps names to them and imports a module only when one of its commands runs
(or its own ``--help`` is asked for), so the modules import what they need at their top. They
read this invocation's settings through ``commands.common.current_settings``, print through
``commands.render``, and import no other command module.

This module holds only the scope of one invocation, which ``cli`` enters without importing a
command module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

# What one invocation of the command line keeps (its settings), while it runs.
INVOCATION: ContextVar[dict[str, Any] | None] = ContextVar("minruntime_invocation", default=None)


@contextmanager
def invocation() -> Iterator[None]:
    """One run of the command line: `current_settings` reads the environment once inside."""
    token = INVOCATION.set({})
    try:
        yield
    finally:
        INVOCATION.reset(token)
