"""Every PostgreSQL address form libpq accepts, read once and written back the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.engine import make_url

from minruntime.errors import ConfigError
from minruntime.pgurl import PgAddress
from minruntime.settings import DatabaseParts, Settings, owner_url_for, with_passfile, with_role

FAILOVER = "postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write"


@pytest.mark.parametrize(
    ("conninfo", "servers"),
    [
        ("postgresql://u@h1/db", (("h1", 5432),)),
        (FAILOVER, (("h1", 5432), ("h2", 5433))),
        ("postgresql://u@/db?host=h1,h2&port=5432,5433", (("h1", 5432), ("h2", 5433))),
        # SQLAlchemy's repeated form: libpq alone would keep only the last host.
        ("postgresql://u@/db?host=h1:5432&host=h2:5433", (("h1", 5432), ("h2", 5433))),
        ("host=h1,h2 port=5433 dbname=db user=u", (("h1", 5433), ("h2", 5433))),
        ("postgresql://u@[::1]:6000,[fe80::1]/db", (("::1", 6000), ("fe80::1", 5432))),
        ("postgresql://u@%2Fvar%2Frun%2Fpostgresql:5433/db", (("/var/run/postgresql", 5433),)),
    ],
)
def test_every_form_names_its_servers_in_order(
    conninfo: str, servers: tuple[tuple[str, int], ...]
) -> None:
    address = PgAddress.parse(conninfo)
    assert address.servers == servers
    assert (address.user, address.dbname) == ("u", "db")
    # Written back as a URI, libpq reads the same servers.
    again = PgAddress.parse(address.uri())
    assert again.servers == servers
    assert again == address


def test_the_failover_form_keeps_its_session_attributes_everywhere() -> None:
    address = PgAddress.parse(FAILOVER)
    assert address.params == {"target_session_attrs": "read-write"}
    url = make_url(address.sqlalchemy())
    assert url.drivername == "postgresql+psycopg"
    assert url.query["host"] == "h1,h2"
    assert url.query["port"] == "5432,5433"
    assert url.query["target_session_attrs"] == "read-write"
    assert address.shown() == "h1:5432,h2:5433/db"


def test_a_single_host_stays_a_plain_url() -> None:
    address = PgAddress.parse("postgresql://u:p%40ss@db.example:6543/state?sslmode=require")
    assert (
        address.sqlalchemy()
        == "postgresql+psycopg://u:p%40ss@db.example:6543/state?sslmode=require"
    )
    assert address.password == "p@ss"
    assert "p@ss" not in address.shown()
    assert "p%40ss" not in address.shown()


def test_a_service_name_is_left_to_libpq() -> None:
    address = PgAddress.parse("postgresql:///?service=minruntime")
    assert address.params == {"service": "minruntime"}
    assert conninfo_to_dict(address.uri()) == {"service": "minruntime"}
    assert make_url(address.sqlalchemy()).query["service"] == "minruntime"
    assert address.shown().startswith("service minruntime")


def test_roles_and_passfiles_keep_every_server(tmp_path: Path) -> None:
    passfile = tmp_path / "pgpass"
    runtime = with_passfile(FAILOVER, passfile)
    assert PgAddress.parse(runtime).params["passfile"] == str(passfile)
    owner = PgAddress.parse(owner_url_for(runtime, passfile))
    assert owner.user == "minruntime_owner"
    assert owner.servers == (("h1", 5432), ("h2", 5433))
    assert owner.params["target_session_attrs"] == "read-write"
    reader = PgAddress.parse(with_role("postgresql://u:secret@h1,h2/db", "r"))
    assert (reader.user, reader.password, reader.hosts) == ("r", None, ("h1", "h2"))


def test_settings_take_the_form_operators_paste(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before the fix: "invalid literal for int() with base 10" and `processor` exiting 2.
    monkeypatch.setenv("MINRUNTIME_DATABASE_URL", FAILOVER)
    settings = Settings()
    assert make_url(settings.sqlalchemy_url).query["host"] == "h1,h2"
    parts: DatabaseParts = settings.database_parts
    assert (parts.host, parts.port, parts.user, parts.dbname) == ("h1", 5432, "u", "db")


@pytest.mark.parametrize(
    "conninfo",
    [
        "postgresql://u@h1,h2/db?port=1,2,3",
        "host=h1 port=notaport",
        "postgresql://u@h1/db?nosuchkeyword=1",
        "dbname='unterminated",
    ],
)
def test_an_address_libpq_refuses_is_one_line(conninfo: str) -> None:
    with pytest.raises(ConfigError) as raised:
        PgAddress.parse(conninfo)
    assert "\n" not in str(raised.value)
