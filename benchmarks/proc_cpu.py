"""CPU seconds of processes, from /proc: a cost that a loaded machine does not distort much.

On a machine whose cores are shared with other work, wall-clock rates swing by 50 % from run to
run; the CPU seconds a reader and the PostgreSQL server spend per event move far less (they
grow a little under contention: caches, context switches). Linux only.
"""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from the 3rd (state) on


def process_cpu(pid: int) -> float:
    """User + system seconds of a live process (every thread)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK


def postgres_pid(port: int) -> int:
    """The postmaster listening on ``port`` (the local stack's), from the command lines."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if words and words[0].endswith(b"postgres") and f"port={port}".encode() in words:
            return int(entry.name)
    raise LookupError(f"no postmaster with port={port} found in /proc")


def tree_cpu(root: int) -> float:
    """User + system seconds of a server: ``root``, its live children and the reaped ones
    (PostgreSQL: the postmaster and its backends; Kafka: the broker's JVM)."""
    fields = _stat(root)
    # utime, stime, cutime, cstime: exited backends are counted in the last two once reaped.
    total = sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICK
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            child = _stat(int(entry.name))
        except OSError:
            continue
        if int(child[1]) == root:
            total += (int(child[11]) + int(child[12])) / _TICK
    return total
