"""How eagerly the processor's consumer asks Kafka for records: paced while records flow.

Kafka answers a fetch once it holds ``fetch.min.bytes`` for it, else after
``fetch.max.wait.ms``. With the client's defaults (1 byte, 500 ms) a live stream is fetched
once per batch a producer sent: at 1,000 events/s from a producer that sends each event
alone, about 475 fetch answers a second, each decoded in Python on the processor's event loop
(taking the interpreter lock from the batch thread) and each served by the broker: a quarter
of the processor's samples at that rate (docs/benchmarks.md, "Freshness: the fetch paced").

While records flow (the last fetch brought some), the consumer asks instead for
``LIVE_MIN_BYTES`` within ``linger_ms``: at most one answer every ``linger_ms`` carrying what
arrived meanwhile, or at once when that much is there (a backlog). Once a fetch comes back
empty it long-polls again with the client's own settings, so an idle processor fetches no
more often than before. A record of a live stream waits up to ``linger_ms`` longer at the
broker; the first record after a quiet spell is answered at once.

aiokafka has no public way to change these per request: ``FetchPace`` sets the two attributes
its fetcher reads each time it builds a request (aiokafka 0.14; an integration test checks
that they are there). Without them the pace is off, logged once, and the consumer fetches as
it always did.
"""

from __future__ import annotations

import logging
from typing import Any, Final

log = logging.getLogger(__name__)

# What a live stream's fetch waits for (with ``linger_ms`` as its bound): about what arrives
# in a few milliseconds at the processor's full rate, so a backlog is not fetched in slivers.
LIVE_MIN_BYTES: Final = 64 * 1024
# The fetcher's attributes its requests are built from (aiokafka.consumer.fetcher.Fetcher).
_MIN_BYTES: Final = "_fetch_min_bytes"
_MAX_WAIT_MS: Final = "_fetch_max_wait_ms"


class FetchPace:
    """Switches a started aiokafka consumer's fetches between live and idle."""

    def __init__(self, client: Any, linger_ms: int) -> None:
        fetcher = getattr(client, "_fetcher", None)
        known = all(
            isinstance(getattr(fetcher, name, None), int) for name in (_MIN_BYTES, _MAX_WAIT_MS)
        )
        if linger_ms > 0 and not known:
            log.warning(
                "this aiokafka's fetcher has no %s and %s: the live stream's fetches are not "
                "paced (MINRUNTIME_PROCESSOR_FETCH_LINGER_MS has no effect)",
                _MIN_BYTES,
                _MAX_WAIT_MS,
            )
        self._fetcher = fetcher if linger_ms > 0 and known else None
        # The client's own settings: what an idle consumer's long poll asks for.
        self._idle = (
            (getattr(fetcher, _MIN_BYTES), getattr(fetcher, _MAX_WAIT_MS))
            if self._fetcher is not None
            else (0, 0)
        )
        self._live_asks = (max(LIVE_MIN_BYTES, self._idle[0]), linger_ms)
        self.live = False

    @property
    def active(self) -> bool:
        """True when fetches are paced (a linger asked for, and the fetcher allows it)."""
        return self._fetcher is not None

    def asks(self) -> tuple[int, int] | None:
        """(min bytes, max wait ms) the fetcher's next request asks for; None when not paced."""
        if self._fetcher is None:
            return None
        return getattr(self._fetcher, _MIN_BYTES), getattr(self._fetcher, _MAX_WAIT_MS)

    def follow(self, fetched: bool) -> None:
        """After a fetch: records came (the stream is live) or none did (it is idle)."""
        if fetched == self.live:
            return
        self.live = fetched
        if self._fetcher is not None:
            min_bytes, max_wait_ms = self._live_asks if fetched else self._idle
            setattr(self._fetcher, _MIN_BYTES, min_bytes)
            setattr(self._fetcher, _MAX_WAIT_MS, max_wait_ms)
