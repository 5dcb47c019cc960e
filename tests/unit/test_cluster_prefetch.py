"""A listing's pages fetched on a thread ahead of the fold: in order, errors in place, stoppable."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from minruntime.cluster.api import prefetched


def test_pages_arrive_in_order_and_ahead_of_the_consumer() -> None:
    made: list[int] = []
    ahead = threading.Event()

    def pages() -> Iterator[int]:
        for number in range(5):
            made.append(number)
            if number == 2:
                ahead.set()  # the third page made while the consumer still holds the first
            yield number

    listing = prefetched(pages(), depth=2)
    assert next(listing) == 0
    assert ahead.wait(5)
    assert list(listing) == [1, 2, 3, 4]
    assert made == [0, 1, 2, 3, 4]


def test_an_error_is_raised_after_the_pages_before_it() -> None:
    def pages() -> Iterator[int]:
        yield 1
        yield 2
        raise LookupError("continue token expired")

    listing = prefetched(pages())
    assert next(listing) == 1
    assert next(listing) == 2
    with pytest.raises(LookupError, match="expired"):
        next(listing)


def test_closing_the_listing_stops_the_producer() -> None:
    done = threading.Event()

    def pages() -> Iterator[int]:
        try:
            number = 0
            while True:
                yield number
                number += 1
        finally:
            done.set()

    listing = prefetched(pages(), depth=1)
    assert next(listing) == 0
    listing.close()
    assert done.wait(5)  # the producer gave up at its next page and closed its generator
