"""Integration fixtures: a scratch PostgreSQL database per session, migrated to head.

The live ``minruntime`` database is never touched: the session creates
``minruntime_test_<random>`` (as the cluster's superuser over the local stack's unix socket,
since the service role may not create databases) and drops it at the end. Each test starts
from empty tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import sqlalchemy as sa

from minruntime.settings import Settings
from minruntime.stack import StackStatus
from minruntime.store import engine_from
from minruntime.store.migrate import upgrade
from minruntime.store.scratch import create_scratch_database, drop_scratch_database
from tests.integration.helpers import reset_state


@pytest.fixture(scope="session")
def database_url(settings: Settings, stack: StackStatus) -> Iterator[str]:
    """A scratch database migrated to head, dropped after the session."""
    url = create_scratch_database(settings)
    try:
        upgrade(url)
        yield url
    finally:
        drop_scratch_database(settings, url)


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[sa.Engine]:
    """The service's engine on the scratch database."""
    engine = engine_from(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def reader(database_url: str) -> Iterator[sa.Engine]:
    """The scratch database as the read-only role ``minruntime_reader`` sees it."""
    parts = urlsplit(database_url)
    netloc = f"minruntime_reader:minruntime_reader@{parts.hostname}:{parts.port}"
    engine = engine_from(urlunsplit(parts._replace(netloc=netloc)))
    yield engine
    engine.dispose()


@pytest.fixture(autouse=True)
def empty_tables(request: pytest.FixtureRequest) -> None:
    """Every test that uses the database starts from empty tables."""
    if "engine" not in request.fixturenames:
        return
    reset_state(request.getfixturevalue("engine"))
