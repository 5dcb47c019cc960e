"""Settings from MINRUNTIME_* variables, defaulting to the local stack; the stack's passwords and
the URLs that name them (pure: files and strings only)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from minruntime.settings import (
    OWNER_ROLE,
    DatabaseParts,
    Settings,
    owner_url_for,
    with_passfile,
    without_password,
)
from minruntime_dev.stack.credentials import ensure_passwords, read_passwords


def test_passwords_are_generated_once_and_kept_private(tmp_path: Path) -> None:
    passfile = tmp_path / "pgpass"
    first = ensure_passwords(passfile, ["a", "b"], {})
    assert stat.S_IMODE(passfile.stat().st_mode) == 0o600
    assert len(set(first.values())) == 2
    assert all(len(password) >= 24 for password in first.values())
    assert ensure_passwords(passfile, ["a", "b"], {}) == first
    assert read_passwords(passfile) == first


def test_a_given_password_wins_and_is_escaped(tmp_path: Path) -> None:
    passfile = tmp_path / "pgpass"
    kept = ensure_passwords(passfile, ["a", "b"], {})
    chosen = ensure_passwords(passfile, ["a", "b"], {"a": r"p:w\\d"})
    assert chosen == {"a": r"p:w\\d", "b": kept["b"]}
    assert read_passwords(passfile) == chosen
    assert r"*:*:*:a:p\:w\\\\d" in passfile.read_text()


def test_defaults_point_at_the_local_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MINRUNTIME_KAFKA_BOOTSTRAP", "MINRUNTIME_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.kafka_bootstrap == "127.0.0.1:9092"
    assert settings.kafka_controller_port == 9093
    assert settings.sqlalchemy_url.startswith("postgresql+psycopg://")


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINRUNTIME_KAFKA_BOOTSTRAP", "10.1.2.3:19092")
    monkeypatch.setenv("MINRUNTIME_DATABASE_URL", "postgresql://u:p@db.example:6543/state")
    settings = Settings()
    assert (settings.kafka_host, settings.kafka_port) == ("10.1.2.3", 19092)
    assert settings.kafka_controller_port == 19093
    parts = DatabaseParts.from_url(settings.database_url)
    assert (parts.host, parts.port, parts.user, parts.password, parts.dbname) == (
        "db.example",
        6543,
        "u",
        "p",
        "state",
    )
    assert settings.sqlalchemy_url == "postgresql+psycopg://u:p@db.example:6543/state"


def test_the_default_url_names_the_stack_passfile_and_no_password(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MINRUNTIME_DATABASE_URL", raising=False)
    monkeypatch.delenv("MINRUNTIME_OWNER_DATABASE_URL", raising=False)
    monkeypatch.setenv("MINRUNTIME_STACK_DIR", str(tmp_path))
    settings = Settings()
    assert settings.database_url == (
        f"postgresql://minruntime@127.0.0.1:5433/minruntime?passfile={tmp_path}/pgpass"
    )
    assert settings.database_parts.password == ""
    # No stack passfile yet: one role does everything (a deployment of older releases).
    assert settings.owner_url == settings.database_url
    (tmp_path / "pgpass").write_text("")
    assert settings.owner_url == (
        f"postgresql://{OWNER_ROLE}@127.0.0.1:5433/minruntime?passfile={tmp_path}/pgpass"
    )


def test_an_explicit_url_is_kept_and_printed_without_its_password(tmp_path: Path) -> None:
    url = "postgresql://svc:s3cret@db.example:6543/state?sslmode=require"
    assert with_passfile(url, tmp_path / "pgpass") == url
    printable = without_password(url, tmp_path / "pgpass")
    assert "s3cret" not in printable
    assert printable == (
        f"postgresql://svc@db.example:6543/state?sslmode=require&passfile={tmp_path}/pgpass"
    )
    assert owner_url_for(url, tmp_path / "p") == (
        f"postgresql://{OWNER_ROLE}@db.example:6543/state?sslmode=require&passfile={tmp_path}/p"
    )


def test_an_explicit_owner_url_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINRUNTIME_DATABASE_URL", "postgresql://rt:x@h:1/d")
    monkeypatch.setenv("MINRUNTIME_OWNER_DATABASE_URL", "postgresql://own:y@h:1/d")
    settings = Settings()
    assert settings.owner_url == "postgresql://own:y@h:1/d"
    assert settings.owner_sqlalchemy_url == "postgresql+psycopg://own:y@h:1/d"
