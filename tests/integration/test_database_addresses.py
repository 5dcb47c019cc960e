"""The address forms operators paste, against the real PostgreSQL of the local stack.

A first host that does not answer stands in for a failed primary: libpq moves on to the next
host, and the service's log line names the server it really reached.
"""

from __future__ import annotations

import logging
import socket

import pytest
import sqlalchemy as sa

from minruntime import health
from minruntime.bootstrap import connected_engine
from minruntime.pgurl import PgAddress
from minruntime.settings import Settings
from minruntime.store import engine_from


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _forms(database_url: str) -> list[str]:
    """The scratch database's address with a dead host first, in every multi-host form."""
    address = PgAddress.parse(database_url)
    dead, live = _closed_port(), address.port
    passfile = address.params["passfile"]
    user, db = address.user, address.dbname
    return [
        f"postgresql://{user}@127.0.0.1:{dead},127.0.0.1:{live}/{db}"
        f"?target_session_attrs=read-write&passfile={passfile}",
        f"postgresql://{user}@/{db}?host=127.0.0.1,127.0.0.1&port={dead},{live}"
        f"&passfile={passfile}",
        f"postgresql://{user}@/{db}?host=127.0.0.1:{dead}&host=127.0.0.1:{live}"
        f"&passfile={passfile}",
        f"host=127.0.0.1,127.0.0.1 port={dead},{live} dbname={db} user={user} "
        f"passfile={passfile} target_session_attrs=any",
    ]


def test_every_multi_host_form_reaches_the_live_server(database_url: str) -> None:
    for form in _forms(database_url):
        engine = engine_from(form, connect_args={"connect_timeout": 5})
        try:
            with engine.connect() as conn:
                port = conn.execute(sa.text("SELECT inet_server_port()")).scalar_one()
                assert port == PgAddress.parse(database_url).port, form
        finally:
            engine.dispose()


def test_the_service_starts_on_the_failover_form_and_names_the_server_it_reached(
    database_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    form = _forms(database_url)[0]
    monkeypatch.setenv("MINRUNTIME_DATABASE_URL", form)
    caplog.set_level(logging.INFO, logger="minruntime.bootstrap")
    engine = connected_engine(Settings(), health.Condition())
    engine.dispose()
    live = PgAddress.parse(database_url)
    reached = f"127.0.0.1:{live.port}/{live.dbname}"
    assert any(f"connected to {reached}" in record.getMessage() for record in caplog.records)
