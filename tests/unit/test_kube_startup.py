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
