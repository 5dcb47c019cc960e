"""Integration fixtures: a scratch PostgreSQL database per session, migrated to head.

The live ``minruntime`` database is never touched: the session creates
``minruntime_test_<random>`` (as the cluster's superuser over the local stack's unix socket,
since the service roles may not create databases) and drops it at the end. Each test starts
from empty tables. Three roles, as in production (docs/storage.md#roles-and-privileges):
``engine`` is the owner (tests build shadows and empty tables), ``runtime`` is the role of
the processor and the worker, ``reader`` is ``minruntime_reader``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from minruntime.settings import READER_ROLE, Settings, with_role
from minruntime.store import engine_from
from minruntime.store.migrate import upgrade
from minruntime_dev.scratch import (
    create_scratch_database,
    drop_scratch_database,
    scratch_owner_url,
)
from minruntime_dev.stack import StackStatus
from tests.integration.helpers import Feed, reset_state


@pytest.fixture(scope="session")
def database_url(settings: Settings, stack: StackStatus) -> Iterator[str]:
    """A scratch database migrated to head (by the owner), dropped after the session.

    The URL is the runtime role's, as ``MINRUNTIME_DATABASE_URL`` would name it.
    """
    url = create_scratch_database(settings)
    try:
        upgrade(scratch_owner_url(settings, url))
        yield url
    finally:
        drop_scratch_database(settings, url)


@pytest.fixture(scope="session")
def owner_database_url(settings: Settings, database_url: str) -> str:
    """The scratch database's URL for the owner role (what migrates it)."""
    return scratch_owner_url(settings, database_url)


@pytest.fixture(scope="session")
def engine(owner_database_url: str) -> Iterator[sa.Engine]:
    """The owner's engine on the scratch database (every test may build shadows)."""
    engine = engine_from(owner_database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def scratch(settings: Settings, database_url: str) -> Iterator[str]:
    """The owner's URL of an empty database of the test's own (not migrated), dropped after it."""
    url = create_scratch_database(settings, "minruntime_test_own")
    yield scratch_owner_url(settings, url)
    drop_scratch_database(settings, url)


@pytest.fixture
def scratch_engine(scratch: str) -> Iterator[sa.Engine]:
    """The owner's engine on ``scratch``, migrated to the head first."""
    upgrade(scratch)
    engine = engine_from(scratch)
    yield engine
    engine.dispose()


@pytest.fixture
def runtime(database_url: str) -> Iterator[sa.Engine]:
    """The scratch database as the processor and the requeue worker see it."""
    engine = engine_from(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def reader(settings: Settings, database_url: str) -> Iterator[sa.Engine]:
    """The scratch database as the read-only role ``minruntime_reader`` sees it."""
    engine = engine_from(with_role(database_url, READER_ROLE, settings.passfile))
    yield engine
    engine.dispose()


@pytest.fixture(autouse=True)
def empty_tables(request: pytest.FixtureRequest) -> None:
    """Every test that uses the database starts from empty tables."""
    if "engine" not in request.fixturenames:
        return
    reset_state(request.getfixturevalue("engine"))


@pytest.fixture
def feed(engine: sa.Engine) -> Feed:
    """Events fed to the owner's engine through ``apply_batch``, as the processor applies them."""
    return Feed(engine)
