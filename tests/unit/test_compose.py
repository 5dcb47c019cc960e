"""docker-compose.yml cannot run here; it must parse and stay in step with the local stack."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from minruntime.settings import KAFKA_VERSION, OWNER_ROLE, DatabaseParts, Settings

ROOT = Path(__file__).resolve().parents[2]


def compose_file() -> dict[str, Any]:
    """docker-compose.yml as data (anchors and merge keys resolved, as Compose does)."""
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


BIND_DEFAULT = "${MINRUNTIME_BIND_ADDRESS:-127.0.0.1}:"


def published(mapping: object) -> tuple[str, str, str]:
    """(host address as Compose resolves it with no variables set, host port(s), container port)."""
    text = str(mapping)
    if text.startswith("${"):
        variable = re.fullmatch(r"\$\{(\w+):-([^}]*)\}:(.*)", text)
        assert variable, text
        address, rest = variable[2], variable[3]
    else:
        address, rest = "0.0.0.0", text
    host, _, container = rest.rpartition(":")
    return address, re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", host), container


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
    assert ("127.0.0.1", str(settings.kafka_port), "9092") in map(
        published, services["kafka"]["ports"]
    )
    db = DatabaseParts.from_url(settings.database_url)
    assert ("127.0.0.1", str(db.port), "5432") in map(published, services["postgres"]["ports"])
    env = services["postgres"]["environment"]
    assert env["POSTGRES_DB"] == db.dbname
    # No fixed password anywhere: generated into the credentials volume, or given by variables.
    assert "POSTGRES_PASSWORD" not in env
    assert not db.password
    runtime = DatabaseParts.from_url(services["migrate"]["environment"]["MINRUNTIME_DATABASE_URL"])
    assert (runtime.user, runtime.password) == (db.user, "")
    roles = (ROOT / "docker" / "postgres-entrypoint.sh").read_text()
    for role in (db.user, OWNER_ROLE, "minruntime_reader"):
        assert f'echo "{role}:${{' in roles, role
    kafka_env = services["kafka"]["environment"]
    assert kafka_env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert kafka_env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"


def test_the_infrastructure_starts_alone_like_stack_up() -> None:
    # `docker compose up -d kafka postgres` must not pull in (or wait for) the service itself.
    services = compose_file()["services"]
    for name in ("kafka", "postgres"):
        assert "depends_on" not in services[name], name
        assert "healthcheck" in services[name], name


def test_every_published_port_binds_to_loopback_unless_told_otherwise() -> None:
    services = compose_file()["services"]
    mappings = [m for spec in services.values() for m in spec.get("ports", [])]
    assert mappings
    for mapping in mappings:
        assert str(mapping).startswith(BIND_DEFAULT), mapping
        assert published(mapping)[0] == "127.0.0.1"


def test_the_postgres_bootstrap_gives_no_role_createrole() -> None:
    services = compose_file()["services"]
    volumes = services["postgres"]["volumes"]
    assert "./docker/postgres-init.sh:/docker-entrypoint-initdb.d/10-minruntime-roles.sh:ro" in (
        volumes
    )
    init = (ROOT / "docker" / "postgres-init.sh").read_text()
    assert "NOCREATEROLE" in init
    assert "OWNER TO minruntime_owner" in init
    assert "FROM PUBLIC" in init
