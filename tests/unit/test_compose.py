"""docker-compose.yml cannot run here; it must parse and stay in step with the local stack."""

from __future__ import annotations

import re
from typing import Any

import yaml

from minruntime.settings import KAFKA_VERSION, OWNER_ROLE, DatabaseParts, Settings
from tests.conftest import ROOT


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


def _host_port_variable(mapping: object) -> tuple[str, str]:
    """(variable, default) of a published mapping's host port(s): `${NAME:-DEFAULT}`."""
    host = str(mapping).removeprefix(BIND_DEFAULT).rpartition(":")[0]
    variable = re.fullmatch(r"\$\{(MINRUNTIME_\w+_HOST_PORTS?):-([\d-]+)\}", host)
    assert variable, mapping
    return variable[1], variable[2]


def _listeners(value: str) -> dict[str, str]:
    return dict(listener.split("://", 1) for listener in value.split(","))


def test_every_host_port_moves_with_a_variable_and_the_podman_check_moves_them_all() -> None:
    # scripts/compose-check.sh runs the file beside the local stack: every published port
    # must move, and the script must move each one.
    services = compose_file()["services"]
    variables = {
        _host_port_variable(mapping)[0]
        for spec in services.values()
        for mapping in spec.get("ports", [])
    }
    script = (ROOT / "scripts" / "compose-check.sh").read_text()
    assert set(re.findall(r"\b(MINRUNTIME_\w+_HOST_PORTS?)=", script)) == variables
    # Its own defaults clash with no default of the file nor the local stack's Kafka ports
    # (broker, controller, kube-apiserver, etcd: the Kafka port + 0..5).
    taken: set[int] = set()
    for spec in services.values():
        for mapping in spec.get("ports", []):
            first, _, last = _host_port_variable(mapping)[1].partition("-")
            taken |= set(range(int(first), int(last or first) + 1))
    taken |= set(range(9092, 9098))
    ours = {int(p) for p in re.findall(r"MINRUNTIME_COMPOSE_CHECK_\w+_PORT:-(\d+)", script)}
    assert len(ours) == 4
    assert not ours & taken


def test_kafka_advertises_to_the_host_the_port_published_there() -> None:
    kafka = compose_file()["services"]["kafka"]
    (mapping,) = kafka["ports"]
    variable, default = _host_port_variable(mapping)
    container_port = str(mapping).rpartition(":")[2]
    environment = kafka["environment"]
    assert _listeners(environment["KAFKA_ADVERTISED_LISTENERS"])["HOST"] == (
        f"localhost:${{{variable}:-{default}}}"
    )
    assert _listeners(environment["KAFKA_LISTENERS"])["HOST"] == f":{container_port}"


def test_the_health_checks_ask_what_the_services_use() -> None:
    services = compose_file()["services"]
    kafka = services["kafka"]
    # The DOCKER listener (the services' own): the HOST one advertises the host's port.
    docker_port = _listeners(kafka["environment"]["KAFKA_LISTENERS"])["DOCKER"].lstrip(":")
    assert f"--bootstrap-server localhost:{docker_port} " in " ".join(kafka["healthcheck"]["test"])
    # TCP: the image's first start runs its init scripts on a unix-socket-only server, which
    # a socket check would take for ready (the `migrate` it releases would then be refused).
    check = " ".join(services["postgres"]["healthcheck"]["test"])
    assert re.search(r"\bpg_isready -h (127\.0\.0\.1|localhost) ", check), check


def test_the_data_live_in_the_named_volumes() -> None:
    services = compose_file()["services"]
    volumes = set(compose_file()["volumes"])

    def mounted(service: str) -> set[str]:
        paths = set()
        for volume in services[service]["volumes"]:
            source, target = str(volume).split(":")[:2]
            if source in volumes:
                paths.add(target)
        return paths

    # apache/kafka's own default is /tmp/kraft-combined-logs, outside any volume.
    assert services["kafka"]["environment"]["KAFKA_LOG_DIRS"] in mounted("kafka")
    # postgres:15 keeps PGDATA in /var/lib/postgresql/data unless told otherwise.
    assert "PGDATA" not in services["postgres"]["environment"]
    assert "/var/lib/postgresql/data" in mounted("postgres")
