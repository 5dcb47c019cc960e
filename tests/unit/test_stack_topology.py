"""`stack up --brokers 3 --pg-standby`: the ports, the remembered topology, the addresses the
stack exports for the settings, the brokers' configuration and cluster ID, and the replication
settings — all without starting anything (tests/e2e/faults/ starts them)."""

from __future__ import annotations

import base64
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from minruntime.errors import ConfigError, StackError, UserError
from minruntime.pgurl import PgAddress
from minruntime.settings import OWNER_ROLE, Settings
from minruntime_dev.commands.stack import parse_signal
from minruntime_dev.stack.access import REPLICATION_ROLE, hba_text
from minruntime_dev.stack.kafka import KafkaNode, Quorum, new_cluster_id
from minruntime_dev.stack.kafka_cluster import KafkaCluster
from minruntime_dev.stack.manager import plan_topology, with_topology
from minruntime_dev.stack.pg_standby import (
    APPLICATION_NAME,
    FENCED_APPLICATION_NAME,
    SLOT,
    primary_conf,
    standby_conf,
)
from minruntime_dev.topology import (
    StackTopology,
    env_file,
    read_stack_env,
    read_topology,
    topology_file,
    write_stack_env,
    write_topology,
)
from tests.unit.test_cli import one_error_line

BROKERS = ("127.0.0.1:9092", "127.0.0.1:9102", "127.0.0.1:9112")
SERVERS = ("127.0.0.1:5433", "127.0.0.1:5434")
URL = "postgresql://minruntime@127.0.0.1:5433/minruntime?passfile=/s/pgpass"


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The defaults (Kafka 9092, PostgreSQL 5433) in a stack directory of the test's own."""
    for name in ("MINRUNTIME_KAFKA_BOOTSTRAP", "MINRUNTIME_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return Settings(stack_dir=tmp_path / "stack")


def test_cluster_ports_keep_clear_of_every_other_port_of_the_stack(settings: Settings) -> None:
    cluster = KafkaCluster(settings)
    ports = [(n.spec.port, n.spec.controller_port) for n in cluster.nodes.values()]
    assert ports == [(9092, 9093), (9102, 9103), (9112, 9113)]
    assert cluster.bootstrap == ",".join(BROKERS)
    taken = {
        settings.kube_apiserver_port_resolved,  # 9095
        settings.kube_etcd_port_resolved,  # 9096, and its peer port 9097
        settings.kube_etcd_port_resolved + 1,
        settings.database_parts.port,  # 5433, the standby 5434
        settings.database_parts.port + 1,
        settings.processor_metrics_port,
        settings.worker_metrics_port,
        settings.kube_bridge_metrics_port,
    }
    assert not taken & {port for pair in ports for port in pair}
    assert [n.home.name for n in cluster.nodes.values()] == ["kafka-1", "kafka-2", "kafka-3"]


def test_a_cluster_node_is_configured_for_three_replicas_two_in_sync(settings: Settings) -> None:
    node = KafkaCluster(settings).nodes[2]
    node.write_config()
    config = dict(
        line.split("=", 1) for line in node.config_file.read_text().splitlines() if "=" in line
    )
    assert config["node.id"] == "2"
    assert config["listeners"] == "PLAINTEXT://127.0.0.1:9102,CONTROLLER://127.0.0.1:9103"
    assert config["controller.quorum.bootstrap.servers"] == (
        "127.0.0.1:9093,127.0.0.1:9103,127.0.0.1:9113"
    )
    assert config["log.dirs"] == str(settings.stack_dir / "kafka-2" / "data")
    expected = {
        "default.replication.factor": "3",
        "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "unclean.leader.election.enable": "false",
    }
    assert {key: config[key] for key in expected} == expected


def test_the_single_broker_is_configured_as_before(settings: Settings) -> None:
    node = KafkaNode(settings)
    node.write_config()
    lines = node.config_file.read_text().splitlines()
    assert node.home == settings.stack_dir / "kafka"
    assert "node.id=1" in lines
    assert "controller.quorum.bootstrap.servers=127.0.0.1:9093" in lines
    assert "offsets.topic.replication.factor=1" in lines
    assert "transaction.state.log.min.isr=1" in lines
    assert not [line for line in lines if line.startswith(("default.replication", "min.insync"))]
    assert node.quorum.format_arguments("127.0.0.1") == ["--standalone"]


def test_every_node_is_formatted_with_the_same_initial_controllers(settings: Settings) -> None:
    cluster = KafkaCluster(settings)
    cluster._ensure_identity()  # what `start` does first: the ids, made once and kept
    quorums = {node.quorum for node in cluster.nodes.values()}
    assert len(quorums) == 1
    (quorum,) = quorums
    flag, voters = quorum.format_arguments("127.0.0.1")
    assert flag == "--initial-controllers"
    entries = voters.split(",")
    assert [entry.split("@")[0] for entry in entries] == ["1", "2", "3"]
    assert [entry.split(":")[1] for entry in entries] == ["9093", "9103", "9113"]
    directory_ids = [entry.rsplit(":", 1)[1] for entry in entries]
    assert len(set(directory_ids)) == 3
    assert all(len(i) == 22 and not i.startswith("-") for i in directory_ids)
    again = KafkaCluster(settings)  # a later process reads the same identity
    assert {node.quorum for node in again.nodes.values()} == {quorum}
    assert quorum.cluster_id
    assert quorum == Quorum(quorum.nodes, quorum.cluster_id)


# The KRaft cluster ID never starts with '-': the storage tool would read it as an option
# ("argument --cluster-id/-t: expected one argument", one format in 64 before).


def test_an_id_that_would_start_with_a_dash_is_drawn_again() -> None:
    # 0xF8.. encodes with a leading '-' (its first six bits are 62).
    dashed, plain = bytes([0xF8]) + bytes(15), uuid.UUID(int=12345).bytes
    assert base64.urlsafe_b64encode(dashed).decode().startswith("-")
    draws: Iterator[bytes] = iter([dashed, dashed, plain])
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == base64.urlsafe_b64encode(plain).decode().rstrip("=")
    assert next(draws, None) is None  # drawn three times


def test_random_ids_are_22_base64url_characters() -> None:
    ids = {new_cluster_id() for _ in range(2_000)}
    assert len(ids) == 2_000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert all(
        set(i) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        for i in ids
    )


def test_plan_follows_the_flags_else_what_the_stack_remembers(settings: Settings) -> None:
    plain = StackTopology()
    assert plan_topology(settings, plain, None, None) == plain
    both = plan_topology(settings, plain, 3, True)
    assert both == StackTopology(BROKERS, SERVERS)
    assert plan_topology(settings, both, None, None) == both
    assert plan_topology(settings, both, 1, None) == StackTopology((), SERVERS)
    assert plan_topology(settings, both, None, False) == StackTopology(BROKERS)
    failed_over = StackTopology(BROKERS, SERVERS, primary=1, fenced=True)
    assert plan_topology(settings, failed_over, None, True) == failed_over
    with pytest.raises(StackError, match="fail back first"):
        plan_topology(settings, failed_over, None, False)
    with pytest.raises(StackError, match="--brokers takes 1"):
        plan_topology(settings, plain, 2, None)


def test_addresses_naming_the_first_node_stand_for_the_whole_stack() -> None:
    topology = StackTopology(BROKERS, SERVERS)
    assert topology.bootstrap_for("127.0.0.1:9092") == ",".join(BROKERS)
    assert topology.bootstrap_for("kafka.example:9092") == "kafka.example:9092"
    assert topology.base_bootstrap(",".join(BROKERS)) == "127.0.0.1:9092"

    expanded = PgAddress.parse(topology.database_url_for(URL))
    assert expanded.servers == (("127.0.0.1", 5433), ("127.0.0.1", 5434))
    assert expanded.params == {"passfile": "/s/pgpass", "target_session_attrs": "read-write"}
    assert PgAddress.parse(topology.base_database_url(expanded.uri())) == PgAddress.parse(URL)
    # Another server, or an explicit choice of the session's kind, is left as given.
    other = "postgresql://minruntime@db.example:5433/minruntime"
    assert topology.database_url_for(other) == other
    chosen = PgAddress.parse(topology.database_url_for(URL + "&target_session_attrs=any"))
    assert chosen.params["target_session_attrs"] == "any"
    # Expanding twice changes nothing.
    once = topology.database_url_for(URL)
    assert topology.database_url_for(once) == once
    assert StackTopology().database_url_for(URL) == URL


def _exported(settings: Settings, topology: StackTopology) -> dict[str, str]:
    """What `stack up` exports for `topology` (the settings as its clients see them)."""
    seen = with_topology(settings, StackTopology(), topology)
    addresses = {
        "MINRUNTIME_KAFKA_BOOTSTRAP": seen.kafka_bootstrap,
        "MINRUNTIME_DATABASE_URL": seen.database_url,
    }
    write_topology(settings.stack_dir, topology)
    write_stack_env(settings.stack_dir, topology, addresses)
    return read_stack_env(settings.stack_dir)


def test_the_settings_take_the_addresses_the_stack_exports(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert not topology_file(settings.stack_dir).exists()
    assert read_stack_env(settings.stack_dir) == {}
    plain = Settings(stack_dir=settings.stack_dir)
    assert plain.kafka_bootstrap == "127.0.0.1:9092"
    assert PgAddress.parse(plain.database_url).servers == (("127.0.0.1", 5433),)

    exported = _exported(settings, StackTopology(BROKERS, SERVERS, primary=1))
    # The settings themselves read no file of the stack's: the environment carries them.
    assert Settings(stack_dir=settings.stack_dir).kafka_bootstrap == "127.0.0.1:9092"
    for name, value in exported.items():
        monkeypatch.setenv(name, value)
    remembering = Settings(stack_dir=settings.stack_dir)
    assert remembering.kafka_bootstrap == ",".join(BROKERS)
    # The first broker's port still derives the API server's and etcd's.
    assert remembering.kafka_port == 9092
    assert remembering.kube_apiserver_port_resolved == 9095
    runtime = PgAddress.parse(remembering.database_url)
    assert runtime.servers == (("127.0.0.1", 5433), ("127.0.0.1", 5434))
    assert runtime.params["target_session_attrs"] == "read-write"
    assert runtime.params["passfile"] == str(remembering.passfile)
    (settings.passfile).parent.mkdir(parents=True, exist_ok=True)
    settings.passfile.write_text("")
    owner = PgAddress.parse(remembering.owner_url)
    assert (owner.user, owner.servers) == (OWNER_ROLE, runtime.servers)
    assert remembering.database_parts.port == 5433  # the stack's own server: the first
    assert "postgresql+psycopg://" in remembering.sqlalchemy_url
    # Settings read under one topology, seen under another (`stack up --no-pg-standby`).
    single = with_topology(remembering, read_topology(settings.stack_dir), StackTopology())
    assert single.kafka_bootstrap == "127.0.0.1:9092"
    assert PgAddress.parse(single.database_url).servers == (("127.0.0.1", 5433),)


def test_the_exported_file_is_shell_syntax_and_names_no_password(settings: Settings) -> None:
    url = "postgresql://minruntime@127.0.0.1:5433,127.0.0.1:5434/minruntime?a=1&b=2"
    topology = StackTopology(BROKERS, SERVERS)
    write_stack_env(settings.stack_dir, topology, {"MINRUNTIME_DATABASE_URL": url})
    text = env_file(settings.stack_dir).read_text()
    assert f"MINRUNTIME_DATABASE_URL='{url}'" in text  # `&` quoted for `. stack.env`
    assert read_stack_env(settings.stack_dir) == {"MINRUNTIME_DATABASE_URL": url}
    with pytest.raises(ValueError, match="exports only"):
        write_stack_env(settings.stack_dir, topology, {"MINRUNTIME_KAFKA_PASSWORD": "x"})


def test_the_plain_topology_leaves_no_file_and_a_broken_one_is_one_line(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    write_topology(settings.stack_dir, StackTopology(BROKERS))
    assert read_topology(settings.stack_dir) == StackTopology(BROKERS)
    _exported(settings, StackTopology(BROKERS))
    assert env_file(settings.stack_dir).exists()
    write_topology(settings.stack_dir, StackTopology())
    write_stack_env(settings.stack_dir, StackTopology(), {})
    assert not topology_file(settings.stack_dir).exists()
    assert not env_file(settings.stack_dir).exists()
    topology_file(settings.stack_dir).write_text("{not json")
    with pytest.raises(ConfigError, match=r"topology\.json is not a topology"):
        read_topology(settings.stack_dir)
    monkeypatch.setenv("MINRUNTIME_STACK_DIR", str(settings.stack_dir))
    assert "topology.json is not a topology" in one_error_line(["stack", "status"], capsys)
    env_file(settings.stack_dir).write_text("MINRUNTIME_KAFKA_BOOTSTRAP='unclosed\n")
    with pytest.raises(ConfigError, match=r"stack\.env is not a file"):
        read_stack_env(settings.stack_dir)


def test_synchronous_replication_and_the_standby_settings() -> None:
    assert "synchronous_commit = on" in primary_conf(synchronous=True)
    assert f"synchronous_standby_names = '{APPLICATION_NAME}'" in primary_conf(synchronous=True)
    assert "synchronous_standby_names = ''" in primary_conf(synchronous=False)
    standby = standby_conf("127.0.0.1", 5433, Path("/h/replication.pgpass"))
    assert f"primary_slot_name = '{SLOT}'" in standby
    assert "hot_standby = on" in standby
    assert "synchronous_standby_names = ''" in standby  # promoted, it waits for nobody
    conninfo = next(line for line in standby.splitlines() if line.startswith("primary_conninfo"))
    for part in ("port=5433", f"user={REPLICATION_ROLE}", f"application_name={APPLICATION_NAME}"):
        assert part in conninfo
    assert "password" not in conninfo  # the passfile holds it
    fenced = standby_conf("127.0.0.1", 5434, Path("/h/replication.pgpass"), fenced=True)
    assert f"application_name={FENCED_APPLICATION_NAME}" in fenced  # never the sync standby
    assert "primary_slot_name = ''" in fenced


def test_only_a_stack_with_a_standby_lets_replication_in() -> None:
    plain = hba_text("postgres")
    assert "replication" not in plain
    with_standby = hba_text("postgres", REPLICATION_ROLE)
    lines = [line.split() for line in with_standby.splitlines() if not line.startswith("#")]
    assert ["host", "replication", REPLICATION_ROLE, "all", "scram-sha-256"] in lines
    # No database for it: its rejections come before the lines that let every role in.
    rejects = [i for i, line in enumerate(lines) if line[2] == REPLICATION_ROLE]
    generic = [i for i, line in enumerate(lines) if line[2] == "all"]
    assert max(rejects) < min(generic)
    assert [line for line in lines if line[2] != REPLICATION_ROLE] == [
        line.split() for line in plain.splitlines() if not line.startswith("#")
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("KILL", signal.SIGKILL), ("sigterm", signal.SIGTERM), ("STOP", signal.SIGSTOP), ("9", 9)],
)
def test_signals_by_name_or_number(name: str, expected: int) -> None:
    assert parse_signal(name) == expected


def test_an_unknown_signal_is_one_line() -> None:
    with pytest.raises(UserError, match="unknown signal 'HUNG'"):
        parse_signal("HUNG")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["stack", "up", "--brokers", "2"], "--brokers takes 1"),
        (["stack", "kill-broker", "1"], "runs one Kafka broker, not a cluster"),
        (["stack", "start-broker", "2"], "runs one Kafka broker, not a cluster"),
        (["stack", "failover"], "has no standby to fail over to"),
    ],
)
def test_the_cluster_commands_on_a_plain_stack_are_one_line(
    argv: list[str],
    fragment: str,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("MINRUNTIME_STACK_DIR", str(settings.stack_dir))
    assert fragment in one_error_line(argv, capsys, code=3)
    assert not settings.stack_dir.exists()  # nothing was started, nothing written
