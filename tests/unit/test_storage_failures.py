"""store.failures: which errors retrying cannot cure (the one classification)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors
from sqlalchemy.exc import DataError, IntegrityError, OperationalError, StatementError

from minruntime.store.failures import describe, is_permanent, sqlstate


def wrapped(error: Exception, wrapper: type[StatementError] = OperationalError) -> StatementError:
    return wrapper("INSERT ...", {}, error)


ERRORS: list[tuple[psycopg.Error, bool]] = [  # (error, permanent)
    (errors.lookup("54000")("index row requires 100016 bytes, maximum size is 8191"), True),
    (errors.lookup("22P02")("invalid input syntax for type json"), True),
    (errors.lookup("22003")("numeric field overflow"), True),
    (errors.lookup("23505")("duplicate key value violates unique constraint"), True),
    (errors.lookup("23514")("new row violates check constraint"), True),
    # transient errors, and bugs: stop, do not dead-letter
    (errors.lookup("40001")("could not serialize access"), False),
    (errors.lookup("40P01")("deadlock detected"), False),
    (errors.lookup("57P01")("terminating connection due to administrator command"), False),
    (errors.lookup("55P03")("lock not available"), False),
    (errors.lookup("08006")("connection failure"), False),
    (errors.lookup("53300")("too many connections"), False),
    (errors.lookup("42P01")("relation does not exist"), False),  # a bug: stop, do not dead-letter
    (psycopg.OperationalError("server closed the connection unexpectedly"), False),
]


@pytest.mark.parametrize(("error", "permanent"), ERRORS)
def test_data_integrity_and_limit_errors_are_permanent_and_others_are_not(
    error: psycopg.Error, permanent: bool
) -> None:
    assert is_permanent(error) is permanent
    assert is_permanent(wrapped(error)) is permanent
    if permanent:
        assert sqlstate(wrapped(error)) == error.sqlstate


def test_a_lost_connection_is_never_permanent() -> None:
    error = OperationalError("SELECT 1", {}, errors.lookup("22P02")("x"))
    error.connection_invalidated = True
    assert not is_permanent(error)


def test_psycopg_client_side_value_refusals_are_permanent() -> None:
    nul = psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
    assert is_permanent(wrapped(nul, DataError))
    # Raised while binding a parameter: SQLAlchemy's StatementError around the Python error.
    assert is_permanent(StatementError("int too big", "INSERT ...", {}, OverflowError("big")))


@pytest.mark.parametrize(
    ("error", "permanent"),
    [
        (RecursionError("maximum recursion depth exceeded"), True),
        (OverflowError("int too large to convert to float"), True),
        (ValueError("bad value"), True),
        (ZeroDivisionError("division by zero"), True),
        (LookupError("topic 'x' carries no known event types"), False),
        (AssertionError(), False),
        (KeyError("k"), False),
        (RuntimeError("unexpected"), False),
    ],
)
def test_python_errors_raised_by_a_value_are_permanent(
    error: BaseException, permanent: bool
) -> None:
    assert is_permanent(error) is permanent


def test_the_description_is_one_bounded_line_without_nul() -> None:
    error = wrapped(errors.lookup("54000")("index row requires 100016 bytes,\nmaximum 8191"))
    assert describe(error) == (
        "PostgreSQL refused it (SQLSTATE 54000): index row requires 100016 bytes,"
    )
    long = describe(ValueError("x\x00" + "y" * 1000))
    assert len(long) == 400
    assert "\x00" not in long
    assert "\n" not in long
    assert describe(IntegrityError("I", {}, errors.lookup("23514")("violates check"))).startswith(
        "PostgreSQL refused it (SQLSTATE 23514): violates check"
    )
