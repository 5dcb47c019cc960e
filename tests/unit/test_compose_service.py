"""The whole service in docker-compose.yml, and its Dockerfile, without a Docker engine.

No engine runs here nor in CI, so these tests check what can drift without one: every
`MINRUNTIME_*` variable is a real setting that takes effect, every command is a real
`minruntime` command, the start order, the ports, the image's Python and install, and that an
installed (non-editable) package finds the migrations the image puts beside it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest
import typer
from packaging.specifiers import SpecifierSet

from minruntime.cli import app
from minruntime.settings import Settings
from minruntime.store.migrate import MIGRATIONS_DIR, head_revision
from tests.conftest import run_cli
from tests.unit.test_compose import ROOT, compose_file, published

# Service → the `minruntime` command it runs; `cli` runs whatever `docker compose run` passes.
SERVICE_COMMANDS = {
    "migrate": "migrate",
    "processor": "processor",
    "requeue-worker": "requeue-worker",
    "snapshotter": "snapshot",
    "cli": None,
}
LONG_RUNNING = ("processor", "requeue-worker", "snapshotter")
INFRASTRUCTURE = ("kafka", "postgres")
METRICS_PORT_FIELD = {
    "processor": "processor_metrics_port",
    "requeue-worker": "worker_metrics_port",
}
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _services() -> dict[str, dict[str, Any]]:
    services = compose_file()["services"]
    assert isinstance(services, dict)
    return services


def _dockerfile(instruction: str) -> list[str]:
    """The arguments of every `instruction` line, continuations joined, comments dropped."""
    lines = [
        line
        for line in (ROOT / "Dockerfile").read_text().splitlines()
        if not line.lstrip().startswith("#")
    ]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    for line in joined.splitlines():
        word, _, arguments = line.strip().partition(" ")
        if word.upper() == instruction:
            found.append(" ".join(arguments.split()))
    return found


def _image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for arguments in _dockerfile("ENV"):
        for item in shlex.split(arguments):
            name, _, value = item.partition("=")
            env[name] = value
    return env


def _service_env(service: str) -> dict[str, str]:
    """The container's environment: the image's ENV, then the compose file's (which wins)."""
    compose_env = _services()[service].get("environment", {})
    return {**_image_env(), **{name: str(value) for name, value in compose_env.items()}}


def _settings_under(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings as the container builds them: only its own MINRUNTIME_* variables set."""
    for name in list(os.environ):
        if name.startswith("MINRUNTIME_"):
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings()


def test_the_service_runs_from_the_project_image() -> None:
    services = _services()
    built = {name for name, spec in services.items() if "build" in spec}
    assert built == set(SERVICE_COMMANDS)
    assert {services[name]["build"] for name in built} == {"."}
    assert len({services[name]["image"] for name in built}) == 1
    # `docker compose up` starts everything but the on-demand `cli`.
    always = {name for name, spec in services.items() if "profiles" not in spec}
    assert always == {*INFRASTRUCTURE, "migrate", *LONG_RUNNING}


@pytest.mark.parametrize("service", sorted(SERVICE_COMMANDS))
def test_every_minruntime_variable_is_a_setting_that_takes_effect(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    variables = {n: v for n, v in _service_env(service).items() if n.startswith("MINRUNTIME_")}
    fields = {name.removeprefix("MINRUNTIME_").lower(): name for name in variables}
    # Settings ignore unknown variables, so a misspelt one would silently do nothing.
    unknown = sorted(name for field, name in fields.items() if field not in Settings.model_fields)
    assert not unknown, f"not Settings fields: {unknown}"
    settings = _settings_under(variables, monkeypatch)
    for field, name in fields.items():
        assert str(getattr(settings, field)) == variables[name], name


@pytest.mark.parametrize("service", sorted(SERVICE_COMMANDS))
def test_the_service_reaches_kafka_and_postgres_on_the_compose_network(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    services = _services()
    settings = _settings_under(_service_env(service), monkeypatch)
    assert settings.kafka_bootstrap == "kafka:19092"
    assert settings.kafka_host in services
    kafka = services["kafka"]["environment"]
    assert f"DOCKER://{settings.kafka_bootstrap}" in kafka["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert f"DOCKER://:{settings.kafka_port}" in kafka["KAFKA_LISTENERS"].split(",")
    db = settings.database_parts
    assert (db.host, db.port) == ("postgres", 5432)
    assert any(str(port).endswith(f":{db.port}") for port in services["postgres"]["ports"])
    postgres = services["postgres"]["environment"]
    assert db.dbname == postgres["POSTGRES_DB"]
    # Runtime and owner roles log in with the generated passwords of the credentials volume.
    for url in (settings.database_url, settings.owner_url):
        assert url.endswith("?passfile=/credentials/pgpass"), url
    assert settings.owner_url != settings.database_url
    assert "credentials:/credentials:ro" in services[service]["volumes"]
    # Metrics on loopback could not be published out of the container.
    assert settings.metrics_host == "0.0.0.0"


@pytest.mark.parametrize("service", sorted(SERVICE_COMMANDS))
def test_every_service_command_is_a_real_minruntime_command(service: str) -> None:
    spec = _services()[service]
    # The image's entrypoint is `minruntime`; the service only gives its arguments.
    assert "entrypoint" not in spec
    command = spec["command"]
    assert isinstance(command, list)
    assert all(isinstance(word, str) for word in command)
    if SERVICE_COMMANDS[service] is not None:
        assert command[0] == SERVICE_COMMANDS[service]
    result = run_cli(*command, "--help", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Usage: minruntime" in result.stdout
    if not command[0].startswith("-"):
        # `--help` wins before values are checked: parse the real arguments too, without running.
        group = typer.main.get_command(app)
        root = group.make_context("minruntime", [command[0]])
        subcommand = group.get_command(root, command[0])
        assert subcommand is not None, command[0]
        subcommand.make_context(command[0], list(command[1:]), parent=root)


@pytest.mark.parametrize("service", [*LONG_RUNNING, "cli"])
def test_the_service_starts_after_migrate_succeeded_and_kafka_is_healthy(service: str) -> None:
    depends_on = _services()[service]["depends_on"]
    assert depends_on["migrate"] == {"condition": "service_completed_successfully"}
    assert depends_on["kafka"] == {"condition": "service_healthy"}


def test_migrate_runs_once_when_postgres_is_healthy() -> None:
    migrate = _services()["migrate"]
    assert migrate["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    # A one-shot that restarts never "completes successfully" for the services waiting on it.
    assert migrate.get("restart", "no") == "no"


@pytest.mark.parametrize("service", [*INFRASTRUCTURE, *LONG_RUNNING])
def test_long_running_services_come_back_after_a_crash(service: str) -> None:
    assert _services()[service]["restart"] in ("unless-stopped", "always", "on-failure")


@pytest.mark.parametrize("service", sorted(METRICS_PORT_FIELD))
def test_metrics_are_published_and_health_checked_on_the_configured_port(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _services()[service]
    settings = _settings_under(_service_env(service), monkeypatch)
    port = getattr(settings, METRICS_PORT_FIELD[service])
    assert port > 0
    assert str(port) in [published(mapping)[2] for mapping in spec["ports"]]
    assert f"http://127.0.0.1:{port}/readyz" in " ".join(spec["healthcheck"]["test"])


def test_the_worker_scales_without_name_or_port_clashes() -> None:
    worker = _services()["requeue-worker"]
    assert "container_name" not in worker
    for mapping in worker["ports"]:
        _, host, container = published(mapping)
        first, _, last = host.partition("-")
        # A host port range: each replica takes a free one, the first replica the usual port.
        assert last, mapping
        assert int(last) > int(first), mapping
        assert int(first) == int(container)


def test_the_processor_scales_with_a_host_port_range_given_by_a_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    processor = _services()["processor"]
    assert "container_name" not in processor
    # No MINRUNTIME_PROCESSOR_INSTANCE_ID: each replica is a static member under its own
    # container host name (`<hostname>:<metrics port>`), so replicas never share an id.
    assert "MINRUNTIME_PROCESSOR_INSTANCE_ID" not in _service_env("processor")
    assert _settings_under(_service_env("processor"), monkeypatch).processor_static_membership
    (mapping,) = processor["ports"]
    variable = re.search(r"\$\{(MINRUNTIME_PROCESSOR_HOST_PORTS):-(\d+)\}:(\d+)$", str(mapping))
    assert variable, mapping
    assert variable[2] == variable[3]  # one replica: the usual port
    # The documented range for several replicas misses every other published port.
    documented = re.search(
        r"MINRUNTIME_PROCESSOR_HOST_PORTS=(\d+)-(\d+) docker compose up -d --scale processor=",
        (ROOT / "docs" / "deployment.md").read_text(),
    )
    assert documented, "docs/deployment.md shows how to scale the processor"
    scaled = set(range(int(documented[1]), int(documented[2]) + 1))
    assert len(scaled) > 1
    for name, spec in _services().items():
        for other in spec.get("ports", []) if name != "processor" else []:
            first, _, last = published(other)[1].partition("-")
            assert not scaled & set(range(int(first), int(last or first) + 1)), (name, other)


def test_the_image_python_is_the_one_the_project_is_checked_with() -> None:
    (base,) = _dockerfile("FROM")
    match = re.fullmatch(r"python:(\d+\.\d+)-slim", base)
    assert match, base
    version = match[1]
    assert version in SpecifierSet(PYPROJECT["project"]["requires-python"])
    assert version == PYPROJECT["tool"]["mypy"]["python_version"]
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py" + version.replace(".", "")


def test_the_image_installs_the_project_with_the_pinned_constraints() -> None:
    assert any(
        re.search(r"\bpip install -c constraints\.txt \.(\s|$)", run) for run in _dockerfile("RUN")
    )
    needed = {
        "pyproject.toml",
        "constraints.txt",
        PYPROJECT["project"]["readme"],
        *PYPROJECT["tool"]["setuptools"]["package-dir"].values(),
        MIGRATIONS_DIR.name,
    }
    assert needed <= _copied_sources()


def test_the_entrypoint_is_the_console_script_and_the_user_is_not_root() -> None:
    (entrypoint,) = _dockerfile("ENTRYPOINT")
    assert json.loads(entrypoint) == ["minruntime"]
    assert PYPROJECT["project"]["scripts"]["minruntime"] == "minruntime.cli:main"
    users = _dockerfile("USER")
    assert users
    assert users[-1].split(":")[0] not in ("root", "0")


def test_dockerignore_hides_local_state_but_nothing_the_image_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert not any(pattern.startswith("!") for pattern in patterns), "the matcher has no `!`"
    for local in (".git", ".venv", ".stack", "tests", "services/minruntime/__pycache__/x.pyc"):
        assert _ignored(local, patterns), local
    for source in _copied_sources():
        path = ROOT / source
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        shipped = [f.relative_to(ROOT).as_posix() for f in files if not _is_build_artifact(f)]
        assert shipped, source
        assert not [f for f in shipped if _ignored(f, patterns)], source


def test_an_installed_package_finds_the_migrations_the_image_copies(tmp_path: Path) -> None:
    (run,) = (run for run in _dockerfile("RUN") if "pip install" in run)
    # The Dockerfile copies migrations/ to the path the installed code itself names.
    assert 'cp -r migrations "$(python -c ' in run
    assert "from minruntime.store.migrate import MIGRATIONS_DIR; print(MIGRATIONS_DIR)" in run
    # A site-packages install, as `pip install .` makes in the image (no checkout around it).
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    shutil.copytree(
        ROOT / "services" / "minruntime",
        site / "minruntime",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    migrations_dir, head = _probe_installed(site)
    assert migrations_dir == tmp_path / "lib" / "python3.11" / "migrations"
    assert head == "CommandError", "an installed package does not ship migrations/"
    shutil.copytree(ROOT / "migrations", migrations_dir)
    assert _probe_installed(site) == (migrations_dir, head_revision())


def test_the_docs_name_only_real_services() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docker compose up -d kafka postgres" in readme
    text = readme + (ROOT / "docs" / "deployment.md").read_text()
    named = set(re.findall(r"--scale ([\w-]+)=", text))
    named |= set(re.findall(r"docker compose (?:run --rm|port(?: --index \d+)?) ([\w-]+)", text))
    for group in re.findall(r"docker compose (?:up -d|logs -f|ps)((?: [a-z][\w-]*)+)", text):
        named |= set(group.split())
    assert {"kafka", "postgres", "requeue-worker", "cli"} <= named
    assert named <= set(_services())


def _copied_sources() -> set[str]:
    sources: set[str] = set()
    for arguments in _dockerfile("COPY"):
        words = [word for word in shlex.split(arguments) if not word.startswith("--")]
        sources.update(word.rstrip("/") for word in words[:-1])
    return sources


def _is_build_artifact(path: Path) -> bool:
    return any(part == "__pycache__" or part.endswith(".egg-info") for part in path.parts)


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore hides `path` (a pattern hides a path or any of its parents).

    fnmatch's `*` also crosses `/`, so this hides at least what Docker hides: stricter.
    """
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        anchored = pattern.strip("/")
        # `**/name` also matches `name` at the top.
        candidates = {anchored, anchored.removeprefix("**/")}
        if any(fnmatchcase(prefix, c) for prefix in prefixes for c in candidates):
            return True
    return False


def _probe_installed(site: Path) -> tuple[Path, str]:
    """MIGRATIONS_DIR and head_revision() (or the error's name) as the installed copy sees them."""
    probe = (
        "from minruntime.store.migrate import MIGRATIONS_DIR, head_revision\n"
        "print(MIGRATIONS_DIR)\n"
        "try:\n"
        "    print(head_revision())\n"
        "except Exception as error:\n"
        "    print(type(error).__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(site)},
        check=True,
    )
    migrations_dir, head = result.stdout.split()
    return Path(migrations_dir), head
