"""What a run costs beyond its own CPU: its peak memory, its PostgreSQL backends' CPU (Linux).

``RunSampler`` samples ``/proc`` every ``interval`` seconds in a thread: the largest sum of the
proportional set sizes of a process tree (this process and every descendant: the parts of a
simulation, a CLI in a subprocess and its parts; ``Pss`` counts a page shared by n
processes, as a forked child shares its parent's, 1/n in each: the sum is the memory the
tree holds) and the largest resident set of one process; with ``database``, the CPU seconds
(user + system) of the PostgreSQL backends serving that database (a backend's process title
names it) since the sampling began, each backend's last reading counted (a backend that ends
between two readings loses at most ``interval`` of it). A peak shorter than the interval
can be missed.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

from proc_cpu import process_cpu


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


def _backends(database: str) -> list[int]:
    """The PostgreSQL backends serving ``database`` ("postgres: ROLE DATABASE HOST STATE")."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split()
        except OSError:
            continue
        if len(words) > 2 and words[0] == b"postgres:" and words[2] == database.encode():
            found.append(int(entry.name))
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


class RunSampler:
    """``with RunSampler() as sampled: ...`` then ``sampled.total`` and ``sampled.largest``
    (bytes) and ``sampled.server_cpu`` (seconds)."""

    def __init__(
        self, database: str | None = None, root: int | None = None, interval: float = 0.25
    ) -> None:
        self.root = os.getpid() if root is None else root
        self.database = database
        self.interval = interval
        self.total = 0
        self.largest = 0
        # Backend pid -> (CPU seconds at its first reading, at its last).
        self._backends: dict[int, tuple[float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)

    def _sample(self) -> None:
        while True:
            sizes = [_sizes(pid) for pid in _tree(self.root)]
            self.total = max(self.total, sum(pss for _, pss in sizes))
            self.largest = max(self.largest, *(rss for rss, _ in sizes))
            if self.database is not None:
                for pid in _backends(self.database):
                    try:
                        used = process_cpu(pid)
                    except (OSError, IndexError, ValueError):
                        continue
                    # A backend that appeared since is counted from its start.
                    first = self._backends.get(pid, (0.0, used))[0]
                    self._backends[pid] = (first, used)
            if self._stop.wait(self.interval):
                return

    @property
    def server_cpu(self) -> float:
        """CPU seconds the database's backends spent while sampled."""
        return sum(last - first for first, last in self._backends.values())

    def __enter__(self) -> RunSampler:
        if self.database is not None:  # the backends already there count from now
            for pid in _backends(self.database):
                used = process_cpu(pid)
                self._backends[pid] = (used, used)
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
