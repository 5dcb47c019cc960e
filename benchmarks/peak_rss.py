"""The peak resident memory of a process and its descendants while something runs (Linux).

``PeakRss`` samples ``/proc`` every ``interval`` seconds in a thread: the largest sum of the
proportional set sizes of a process tree (this process and every descendant: the parts of a
simulation, a CLI in a subprocess and its parts; ``Pss`` counts a page shared by n
processes, as a forked child shares its parent's, 1/n in each: the sum is the memory the
tree holds) and the largest resident set of one process. A peak shorter than the interval
can be missed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType


def _tree(root: int) -> list[int]:
    """``root`` and its live descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(text[text.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def _sizes(pid: int) -> tuple[int, int]:
    """(Rss, Pss) of ``pid`` in bytes; zeros once it is gone."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return rss, pss


class PeakRss:
    """``with PeakRss() as peak: ...`` then ``peak.total`` and ``peak.largest`` (bytes)."""

    def __init__(self, root: int | None = None, interval: float = 0.25) -> None:
        self.root = os.getpid() if root is None else root
        self.interval = interval
        self.total = 0
        self.largest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)

    def _sample(self) -> None:
        while True:
            sizes = [_sizes(pid) for pid in _tree(self.root)]
            self.total = max(self.total, sum(pss for _, pss in sizes))
            self.largest = max(self.largest, *(rss for rss, _ in sizes))
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def text(self) -> str:
        return (
            f"peak {self.total / 2**30:.2f} GiB in all (Pss), "
            f"{self.largest / 2**30:.2f} GiB in the largest process (RSS)"
        )
