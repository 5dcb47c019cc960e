"""Which storage failures retrying cannot cure: the one classification of the service.

A *permanent* failure comes from the data being written, so the same record fails the same way
on every attempt and must be set aside (dead-lettered), never retried:

- SQLSTATE class 22 (data exception: a value out of range, invalid text for jsonb, ...),
  class 23 (integrity constraint violation) and class 54 (program limit exceeded, e.g. "index
  row size exceeds btree maximum"; psycopg reports it as an OperationalError, which is why the
  class and not the exception type decides);
- psycopg's client-side refusals of a value (``psycopg.DataError`` without a SQLSTATE);
- a Python ``RecursionError``, ``OverflowError``, ``ValueError`` or other ``ArithmeticError``
  raised while a record is applied (a value Python cannot compute with).

Everything else is not permanent: a lost connection, a server shutting down, a deadlock or a
serialization failure (classes 08, 40, 53, 57, 58) is transient and worth retrying; a
programming error (class 42, an AssertionError, a LookupError for a topic with no role) is a
bug that must stop the process loudly instead of dead-lettering every record.
"""

from __future__ import annotations

from typing import Final

import psycopg
from sqlalchemy.exc import DBAPIError, StatementError

PERMANENT_SQLSTATE_CLASSES: Final = frozenset({"22", "23", "54"})
_PERMANENT_PYTHON: Final = (RecursionError, ArithmeticError, ValueError)
_MAX_DESCRIPTION: Final = 400


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a database error (wrapped by SQLAlchemy or not), None when it has none."""
    orig = error.orig if isinstance(error, StatementError) else error
    state = getattr(orig, "sqlstate", None)
    return state if isinstance(state, str) else None


def is_permanent(error: BaseException) -> bool:
    """True when the same input would fail the same way again (see the module's docstring)."""
    if isinstance(error, DBAPIError):
        if error.connection_invalidated:
            return False
        state = sqlstate(error)
        if state is None:
            return isinstance(error.orig, psycopg.DataError)
        return state[:2] in PERMANENT_SQLSTATE_CLASSES
    if isinstance(error, StatementError):
        # Raised while binding parameters (e.g. a number psycopg cannot adapt): look inside.
        return error.orig is not None and is_permanent(error.orig)
    if isinstance(error, psycopg.Error):
        return error.sqlstate is not None and error.sqlstate[:2] in PERMANENT_SQLSTATE_CLASSES
    return isinstance(error, _PERMANENT_PYTHON)


def describe(error: BaseException) -> str:
    """One bounded line saying what refused the record (no NUL: it is stored as text)."""
    state = sqlstate(error)
    if state is not None:
        orig = error.orig if isinstance(error, StatementError) else error
        lines = str(orig).strip().splitlines()
        text = f"PostgreSQL refused it (SQLSTATE {state}): {lines[0] if lines else ''}"
    else:
        inner = error.orig if isinstance(error, StatementError) and error.orig else error
        text = f"{type(inner).__name__} while applying it: {inner}"
    text = " ".join(text.replace("\x00", " ").split())
    if len(text) > _MAX_DESCRIPTION:
        text = text[: _MAX_DESCRIPTION - 3] + "..."
    return text


READ_ONLY_SQLSTATE: Final = "25006"  # read_only_sql_transaction


def needs_the_primary(error: BaseException) -> str | None:
    """One line when ``error`` is a write refused by a read-only server (a hot standby, or
    `default_transaction_read_only`), wrapped by SQLAlchemy or not; None otherwise.

    The read surface and the live answers write nothing; the commands that fill a temporary
    shadow schema first (`--at`, `audit`, `whatif`, `replay`) need the primary.
    """
    orig = error.orig if isinstance(error, DBAPIError) else error
    if getattr(orig, "sqlstate", None) != READ_ONLY_SQLSTATE:
        return None
    return (
        "this command needs the primary: it builds a temporary shadow schema, and the server "
        "is read-only (a standby); point MINRUNTIME_OWNER_DATABASE_URL at the primary, or use "
        "target_session_attrs=read-write"
    )
