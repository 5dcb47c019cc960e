"""FetchPace alone: what it asks a fetcher for, and when it stays out of the way."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from minruntime.stream.fetch_pace import LIVE_MIN_BYTES, FetchPace


def client(**fetcher: object) -> SimpleNamespace:
    return SimpleNamespace(_fetcher=SimpleNamespace(**fetcher))


def test_live_asks_for_more_within_the_linger_and_idle_restores_the_clients_own() -> None:
    consumer = client(_fetch_min_bytes=10, _fetch_max_wait_ms=300)
    pace = FetchPace(consumer, 7)
    assert pace.active
    assert not pace.live
    assert pace.asks() == (10, 300)  # untouched until a fetch brings records
    pace.follow(True)
    assert pace.live
    assert pace.asks() == (LIVE_MIN_BYTES, 7)
    pace.follow(True)
    assert pace.asks() == (LIVE_MIN_BYTES, 7)
    pace.follow(False)
    assert not pace.live
    assert pace.asks() == (10, 300)


def test_a_client_asking_for_more_than_the_live_minimum_keeps_its_minimum() -> None:
    pace = FetchPace(client(_fetch_min_bytes=LIVE_MIN_BYTES * 4, _fetch_max_wait_ms=500), 5)
    pace.follow(True)
    assert pace.asks() == (LIVE_MIN_BYTES * 4, 5)


def test_no_linger_leaves_the_fetcher_alone() -> None:
    consumer = client(_fetch_min_bytes=1, _fetch_max_wait_ms=500)
    pace = FetchPace(consumer, 0)
    pace.follow(True)
    assert not pace.active
    assert pace.asks() is None
    assert (consumer._fetcher._fetch_min_bytes, consumer._fetcher._fetch_max_wait_ms) == (1, 500)


@pytest.mark.parametrize("fetcher", [None, SimpleNamespace(), SimpleNamespace(_fetch_min_bytes=1)])
def test_a_fetcher_without_the_attributes_is_not_paced_and_says_so(
    fetcher: object, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="minruntime.stream.fetch_pace"):
        pace = FetchPace(SimpleNamespace(_fetcher=fetcher), 5)
    pace.follow(True)
    assert not pace.active
    assert pace.asks() is None
    assert "not paced" in caplog.text
    assert not hasattr(fetcher, "_fetch_max_wait_ms")
