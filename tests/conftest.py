"""Shared fixtures. Tests that need the real stack take `stack`, which brings it up (idempotent)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from minruntime.settings import Settings
from minruntime.stack import StackStatus, stack_up

ROOT = Path(__file__).resolve().parents[1]

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


def free_port_pair() -> int:
    """A port p such that p and p + 1 are both free on 127.0.0.1."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port >= 65535:
            continue
        with socket.socket() as second:
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair found")


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
