"""The e2e tests' shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from minruntime.settings import Settings
from minruntime.stack import StackStatus
from tests.e2e.harness import Pipeline


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
    running = Pipeline(settings, tmp_path_factory.mktemp(name), name).create().start()
    try:
        yield running
    finally:
        running.drop()
