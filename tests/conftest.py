"""Shared fixtures. Tests that need the real stack take `stack`, which brings it up (idempotent)."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus, stack_down, stack_up
from minruntime_dev.stack.postgres import PostgresNode
from minruntime_dev.topology import read_stack_env

ROOT = Path(__file__).resolve().parents[1]


def _load_stack_env() -> None:
    """A stack of three brokers or with a standby exports their addresses (`<stack
    dir>/stack.env`, minruntime_dev.topology); every test process and its children use them.
    A `MINRUNTIME_*` variable set already wins. A plain stack exports nothing."""
    for name, value in read_stack_env(Settings().stack_dir).items():
        os.environ.setdefault(name, value)


_load_stack_env()

# Hypothesis's per-example deadline is a timed assertion: on a loaded 2-core machine (Kafka,
# PostgreSQL and a processor beside the tests) it fails for reasons that are not behaviour.
hypothesis_settings.register_profile("minruntime", deadline=None)
hypothesis_settings.load_profile("minruntime")
MINRUNTIME = str(Path(sys.executable).with_name("minruntime"))


@pytest.fixture(scope="session")
def settings() -> Settings:
    """The settings every test process sees (environment + defaults)."""
    return Settings()


@pytest.fixture(scope="session")
def stack(settings: Settings) -> StackStatus:
    """The real Kafka + PostgreSQL stack, started if it is not running."""
    status = stack_up(settings)
    assert status.healthy, status
    return status


@pytest.fixture(scope="session")
def kube_stack(settings: Settings) -> StackStatus:
    """The stack plus a real kube-apiserver with the project's CRDs (`stack up --kube`).

    The first run on a machine builds kube-apiserver and etcd with Go (minutes; `scripts/test.sh`
    does it before pytest starts); later runs reuse the cache. `status.kubeconfig` is the admin
    kubeconfig."""
    status = stack_up(settings, kube=True)
    assert status.healthy, status
    assert status.kubeconfig is not None
    return status


def private_stack_env(stack_dir: Path, kafka_port: int, pg_port: int) -> dict[str, str]:
    """MINRUNTIME_* for a stack with its own directory and ports, as a fresh clone's defaults
    (no password in the URL: libpq reads the generated ones from the stack's passfile)."""
    return {
        "MINRUNTIME_STACK_DIR": str(stack_dir),
        "MINRUNTIME_KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka_port}",
        "MINRUNTIME_DATABASE_URL": (
            f"postgresql://minruntime@127.0.0.1:{pg_port}/minruntime?passfile={stack_dir}/pgpass"
        ),
        "MINRUNTIME_KAFKA_HEAP": "384m",
    }


def remove_stack(settings: Settings) -> None:
    """Stop a private stack and delete its PostgreSQL data (run as root, the servers' data
    lives outside the stack directory)."""
    stack_down(settings)
    node = PostgresNode(settings)
    if node.as_root:
        shutil.rmtree(node.home.parent, ignore_errors=True)


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    """Run the installed `minruntime` console script as a user would."""
    return subprocess.run(
        [MINRUNTIME, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range of local ports for outgoing connections."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int = 1) -> int:
    """A port p such that p .. p + count - 1 are free on 127.0.0.1, outside the ephemeral range.

    A port from the ephemeral range (what binding port 0 gives) can be taken at any moment by
    an outgoing connection's local end: between the choice and a server's bind, or while a
    test stops and restarts that server; a server on it then cannot start (a flake seen in
    CI with a private Kafka broker restarted on such a port). Ports below the range are only
    ever taken by listeners.
    """
    low, high = _ephemeral_range()
    candidates = (10000, low - count) if low - count > 10000 else (high + 1, 65535 - count)
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(*candidates)
        if all(_bindable(port + i) for i in range(count)):
            return port
    raise RuntimeError(f"no {count} free consecutive ports found in {candidates}")


@contextmanager
def environ(env: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``env`` set for the block, as it was after it."""
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def free_port_pair() -> int:
    """A port p such that p and p + 1 are both free on 127.0.0.1 (see ``free_ports``)."""
    return free_ports(2)


@pytest.fixture
def listening_socket() -> Iterator[socket.socket]:
    """A socket that holds a port, as another program would."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        yield sock
    finally:
        sock.close()
