"""The demos' child processes: `minruntime` commands run as a user would run them.

``DemoChild`` supervises a long-running command (the processor, the worker, the bridge) and
fails with its last log line if it exits early; ``run_cli_as_user`` runs a one-shot command and
returns what it printed (``show_commands``: after the question it answers). Used by every
part of `minruntime demo` and by `demo --kube`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, TypeVar

from minruntime.errors import UserError
from minruntime.stream.topic_guard import REFUSAL

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")


@dataclass
class DemoChild:
    """A `minruntime` subprocess of the demo; its stderr is kept to explain an early exit."""

    command: str
    process: subprocess.Popen[bytes]
    stderr: IO[bytes]
    # How far ``check`` has looked for a refusal in its log (whole lines only).
    scanned: int = 0

    @classmethod
    def start(cls, command: str, env: Mapping[str, str] | None = None) -> DemoChild:
        """Run `python -m minruntime.cli COMMAND` with the demo's environment plus ``env``."""
        stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        process = subprocess.Popen(
            [sys.executable, "-m", "minruntime.cli", *command.split()],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, **(env or {})},
        )
        return cls(command, process, stderr)

    @property
    def pid(self) -> int:
        return self.process.pid

    def tail(self, count: int) -> list[str]:
        """Its last ``count`` stderr lines (its log) so far."""
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        self.stderr.seek(0, os.SEEK_END)
        return lines[-count:]

    def _new_lines(self) -> list[str]:
        """The whole lines its log gained since the last call."""
        self.stderr.seek(self.scanned)
        written = self.stderr.read()
        self.stderr.seek(0, os.SEEK_END)
        complete = written[: written.rfind(b"\n") + 1]
        self.scanned += len(complete)
        return complete.decode(errors="replace").splitlines()

    def check(self) -> None:
        """Fail with its last stderr line if it has exited, or with its refusal of a topic.

        A processor that refuses a topic (stored offsets of another life of it) waits for an
        operator's `minruntime offsets rebaseline`: the demo says so at once instead of
        waiting for events that will not be applied."""
        if self.process.poll() is None:
            refusal = next((line for line in self._new_lines() if REFUSAL in line), None)
            if refusal is not None:
                message = refusal.partition("[ERROR] ")[2] or refusal
                raise UserError(f"`minruntime {self.command}`: {message.strip()}")
            return
        raise _exited(self.command, self.process.returncode, self.tail(1))

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; the demo leaves nothing running."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        self.stderr.close()

    def __enter__(self) -> DemoChild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_cli_as_user(*args: str, check: bool = True, width: int | None = None) -> str:
    """Run `minruntime ARGS` as a user would; its stdout (UserError with its error line)."""
    env = {**os.environ, **({"COLUMNS": str(width)} if width else {})}
    result = subprocess.run(
        [sys.executable, "-m", "minruntime.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if check and result.returncode != 0:
        raise _exited(" ".join(args), result.returncode, result.stderr.strip().splitlines())
    return result.stdout


def _exited(command: str, status: int, log: list[str]) -> UserError:
    """`minruntime COMMAND` exited with STATUS, and the last line of its log."""
    why = f": {log[-1]}" if log else ""
    return UserError(f"`minruntime {command}` exited with status {status}{why}")


def show_commands(console: Console, steps: Sequence[tuple[str, tuple[str, ...]]]) -> None:
    """Each question, the command a user types to answer it, and what the command prints."""
    for title, args in steps:
        console.print(f"\n[bold]{title}[/]")
        console.print(f"[bold]$ minruntime {' '.join(args)}[/]")
        output = run_cli_as_user(*args, width=console.width)
        console.print(output.rstrip(), markup=False, highlight=False, soft_wrap=True)


def free_port(host: str) -> int:
    """A port nobody listens on now (the worker's metrics; the default may be taken)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def wait_for(
    check: Callable[[], T | None], children: Sequence[DemoChild], timeout: float, what: str
) -> T:
    """Until ``check`` returns something true (returned); a child that exits fails it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in children:
            child.check()
        result = check()
        if result:
            return result
        time.sleep(0.3)
    # The one-line error says what did not happen; the processes' last log lines (on stderr,
    # before it) say why, e.g. a processor still waiting for its consumer group.
    for child in children:
        for line in child.tail(8):
            print(f"[{child.command}] {line}", file=sys.stderr)
    raise UserError(f"the demo timed out after {timeout:.0f}s waiting for {what}")
