"""docker-compose.yml cannot run here; it must parse and stay in step with the local stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from minruntime.settings import KAFKA_VERSION, DatabaseParts, Settings

ROOT = Path(__file__).resolve().parents[2]


def compose_file() -> dict[str, Any]:
    """docker-compose.yml as data (anchors and merge keys resolved, as Compose does)."""
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_compose_names_the_stack_services() -> None:
    services = compose_file()["services"]
    assert {"kafka", "postgres"} <= set(services)
    assert services["kafka"]["image"] == f"apache/kafka:{KAFKA_VERSION}"
    assert services["postgres"]["image"].startswith("postgres:15")


def test_compose_ports_and_credentials_match_the_local_stack_defaults(
    monkeypatch: Any,
) -> None:
    for name in ("MINRUNTIME_KAFKA_BOOTSTRAP", "MINRUNTIME_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    services = compose_file()["services"]
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


def test_the_infrastructure_starts_alone_like_stack_up() -> None:
    # `docker compose up -d kafka postgres` must not pull in (or wait for) the service itself.
    services = compose_file()["services"]
    for name in ("kafka", "postgres"):
        assert "depends_on" not in services[name], name
        assert "healthcheck" in services[name], name
