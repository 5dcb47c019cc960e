"""The e2e tests' shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from minruntime.settings import Settings
from minruntime_dev.scratch import SCRATCH_PREFIX, create_scratch_database, drop_scratch_database
from minruntime_dev.stack import StackStatus
from tests.e2e.harness import Pipeline, running_pipeline


@pytest.fixture(scope="module")
def pipeline(
    stack: StackStatus,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Pipeline]:
    """A started processor on its own database and topics, for one test module (named after
    it), dropped after the module's last test."""
    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    with running_pipeline(settings, tmp_path_factory.mktemp(name), name) as running:
        yield running


@pytest.fixture
def unmigrated(stack: StackStatus, settings: Settings) -> Iterator[str]:
    """The URL of an empty database that was never migrated, dropped after the test."""
    url = create_scratch_database(settings, f"{SCRATCH_PREFIX}_unmigrated")
    try:
        yield url
    finally:
        drop_scratch_database(settings, url)
