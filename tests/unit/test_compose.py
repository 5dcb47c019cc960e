"""docker-compose.yml cannot run here; it must parse and stay in step with the local stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from minruntime.settings import KAFKA_VERSION, DatabaseParts, Settings

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_compose_names_the_stack_services() -> None:
    services = _compose()["services"]
    assert {"kafka", "postgres"} <= set(services)
    assert services["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
    assert services["postgres"]["image"].startswith("postgres:15")


def test_compose_ports_and_credentials_match_the_local_stack_defaults(
    monkeypatch: Any,
) -> None:
    for name in ("MINRUNTIME_KAFKA_BOOTSTRAP", "MINRUNTIME_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    services = _compose()["services"]
    assert f"{settings.kafka_port}:9092" in services["kafka"]["ports"]
    db = DatabaseParts.from_url(settings.database_url)
    assert f"{db.port}:5432" in services["postgres"]["ports"]
    env = services["postgres"]["environment"]
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]) == (
        db.user,
        db.password,
        db.dbname,
    )
    kafka_env = services["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert kafka_env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
