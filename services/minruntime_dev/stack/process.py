"""Small process and port helpers shared by the Kafka and PostgreSQL nodes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from minruntime.errors import PortInUseError, StackError


@dataclass(frozen=True)
class Health:
    """What a health check of one node (PostgreSQL, a Kafka broker, etcd, the API server) found."""

    running: bool
    healthy: bool
    pid: int | None
    detail: str


def port_in_use(host: str, port: int) -> bool:
    """True when something accepts TCP connections on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def require_free_port(host: str, port: int, what: str, env_hint: str) -> None:
    """Fail with one clear line when another process already holds the port."""
    if port_in_use(host, port):
        raise PortInUseError(
            f"port {port} on {host} is already in use by another process; "
            f"stop it or choose another port for {what} with {env_hint}"
        )


def read_pid(pid_file: Path) -> int | None:
    """The pid recorded in pid_file, if the file exists and holds a number."""
    try:
        return int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def running_pid(pid_file: Path) -> int | None:
    """The pid recorded in pid_file while that process runs, else None."""
    pid = read_pid(pid_file)
    return pid if pid_alive(pid) else None


def pid_alive(pid: int | None) -> bool:
    """True when a process with this pid exists (and is not a zombie)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return status != "Z"


def send_signal(pid: int, sig: signal.Signals) -> bool:
    """Send `sig` to the process group `pid` leads (a daemon's own session); False when
    there is no such process."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        os.kill(pid, sig)
    return True


def exited(pid: int) -> bool:
    """True once the process is gone (reaped, when it is a child of this one)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # a child of this one stays a zombie until waited for
    return not pid_alive(pid)


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM the process group, wait up to `timeout`, then SIGKILL it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not send_signal(pid, sig):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if exited(pid):
                return
            time.sleep(0.1)


def spawn_daemon(command: Sequence[str], log_file: Path, pid_file: Path, cwd: Path) -> None:
    """Start a long-running server in its own session (so `terminate` stops its whole group),
    its output appended to `log_file`, its pid written to `pid_file`."""
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=cwd,
        )
    pid_file.write_text(f"{process.pid}\n")


def stop_daemon(pid_file: Path, timeout: float) -> bool:
    """Stop the server `pid_file` names (SIGTERM, then SIGKILL); True when one was running."""
    pid = running_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    terminate(pid, timeout)
    pid_file.unlink(missing_ok=True)
    return True


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.25) -> bool:
    """Poll `check` until it is true or `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (created 0600, never briefly wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(text)


def tail(path: Path, lines: int = 5) -> str:
    """The last few lines of a log file, joined with ' | ' for a one-line error."""
    try:
        content = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no log)"
    return " | ".join(line.strip() for line in content[-lines:])


def run(cmd: Sequence[str], what: str, timeout: float = 600, **kwargs: object) -> str:
    """Run a command to completion; a failure becomes one StackError line with its output."""
    try:
        done = subprocess.run(
            list(cmd),
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,  # type: ignore[call-overload]
        )
    except FileNotFoundError as exc:
        raise StackError(f"{what}: {exc.filename} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise StackError(f"{what}: timed out after {timeout:.0f}s") from exc
    if done.returncode != 0:
        output = " | ".join((done.stderr or done.stdout).strip().splitlines()[-4:])
        raise StackError(f"{what} failed (exit {done.returncode}): {output}")
    return str(done.stdout)
