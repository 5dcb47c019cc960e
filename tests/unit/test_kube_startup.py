"""`minruntime kube bridge` starts without the store's modules: a restarted bridge's first
second is its own (its drift check imports them at its first read of the service)."""

from __future__ import annotations

import subprocess
import sys


def test_the_bridge_command_imports_neither_sqlalchemy_nor_psycopg() -> None:
    code = (
        "import sys\n"
        "import minruntime.cli, minruntime.commands.kube, minruntime.cluster.bridge\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sqlalchemy', 'psycopg'}))\n"
        "print(sorted(m for m in sys.modules if m.startswith('minruntime.store')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "[]"]


def test_the_drift_checks_read_imports_the_store_when_called() -> None:
    """The reader the command hands the bridge is the service side's (imported late)."""
    code = (
        "import sys, inspect\n"
        "from minruntime.commands import kube\n"
        "source = inspect.getsource(kube._read_service)\n"
        "assert 'read_podgroups' in source and 'service_podgroup' in source\n"
        "from minruntime.commands.common import database_error\n"
        "print(database_error(ValueError('x')), 'sqlalchemy' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None True"


def test_the_client_apis_the_listing_needs_are_imported_on_a_thread_started_before_the_lease() -> (
    None
):
    """CoreV1Api and its kin (pydantic models: half a second of CPU) are imported while the
    bridge waits for the Lease, Kafka and the ledger, not after the ledger is read."""
    code = (
        "import sys, inspect\n"
        "from minruntime.cluster import bridge\n"
        "from minruntime.cluster.api import preload_sources\n"
        "api = 'kubernetes.client.api.core_v1_api'\n"
        "before = api in sys.modules\n"
        "thread = preload_sources()\n"
        "thread.join(60)\n"
        "print(before, api in sys.modules, thread.daemon)\n"
        "source = inspect.getsource(bridge.run_bridge)\n"
        "print(source.index('preload_sources()') < source.index('bridge.run()'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["False True True", "True"]
