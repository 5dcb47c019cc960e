"""A stop event for the retry loops' tests: its waits return at once and are recorded."""

from __future__ import annotations

import threading


class FakeStop(threading.Event):
    """Waits return at once, each delay recorded; set after `set_after_waits` of them."""

    def __init__(self, set_after_waits: int | None = None) -> None:
        super().__init__()
        self.delays: list[float] = []
        self._set_after = set_after_waits

    def wait(self, timeout: float | None = None) -> bool:
        self.delays.append(timeout or 0.0)
        if self._set_after is not None and len(self.delays) >= self._set_after:
            self.set()
        return self.is_set()
