"""Settings come from MINRUNTIME_* variables and default to the local stack."""

from __future__ import annotations

import pytest

from minruntime.settings import DatabaseParts, Settings


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
