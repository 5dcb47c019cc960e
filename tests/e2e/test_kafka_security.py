"""The whole pipeline over an authenticated, encrypted Kafka listener (issue 12, part 7).

A second broker, started by the stack code on private ports and a private stack directory with
MINRUNTIME_KAFKA_SECURITY_PROTOCOL=SASL_SSL (keystores from keytool, SCRAM credentials added
when its storage is formatted), so the plain broker keeps serving the other tests. Its only
client listener is SASL_SSL: every record below went through TLS and a SASL login, with
SCRAM-SHA-512 and with PLAIN. A wrong password, an untrusted certificate and a PLAINTEXT
client are refused, each with one line.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError
from pydantic import SecretStr

from minruntime.kafka_access import kafka_access, stack_ca_file, stack_credentials_file
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from minruntime_dev.stack.kafka import KafkaNode
from tests import cloudevents as ce
from tests.conftest import free_port_pair, run_cli
from tests.e2e.harness import Pipeline, wait_for
from tests.e2e.test_requeue_worker import (
    OVERRUN,
    Scene,
    decision_ids,
    decisions,
    node_upserted,
    wait_decisions,
    wait_published,
)

pytestmark = pytest.mark.stack

# Public CAs only: the local broker's certificate is signed by the stack's own CA.
SYSTEM_CAS = Path("/etc/ssl/certs/ca-certificates.crt")


@pytest.fixture(scope="module")
def broker(
    stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """A SASL_SSL broker on private ports and its own stack directory."""
    port = free_port_pair()
    private = settings.model_copy(
        update={
            "kafka_bootstrap": f"127.0.0.1:{port}",
            "stack_dir": tmp_path_factory.mktemp("sasl-ssl-stack"),
            "kafka_security_protocol": "SASL_SSL",
            "kafka_heap": "384m",
            # The stack's own clients use the credentials and CA it generated.
            "kafka_username": None,
            "kafka_password": None,
            "kafka_ssl_cafile": None,
        }
    )
    node = KafkaNode(private)
    try:
        node.start()
        node.wait_ready(private.stack_timeout_seconds)
        yield private
    finally:
        node.stop()


@pytest.fixture(scope="module")
def secured(broker: Settings, settings: Settings) -> Settings:
    """Client settings for that broker, given explicitly as a deployment would."""
    generated = json.loads(stack_credentials_file(broker.stack_dir).read_text())
    return settings.model_copy(
        update={
            "kafka_bootstrap": broker.kafka_bootstrap,
            "kafka_security_protocol": "SASL_SSL",
            "kafka_username": generated["username"],
            "kafka_password": SecretStr(generated["password"]),
            "kafka_ssl_cafile": stack_ca_file(broker.stack_dir),
        }
    )


def _pipeline(secured: Settings, mechanism: str, workdir: Path) -> Pipeline:
    base = secured.model_copy(update={"kafka_sasl_mechanism": mechanism})
    name = mechanism.split("-")[0].lower()
    return Pipeline(base, workdir, name, overrides={"requeue_interval_seconds": "1"})


def one_line_error(result: Any) -> str:
    """The CLI failed with exactly one line on stderr and no traceback; return that line."""
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return str(lines[0])


def test_the_stack_keeps_its_secrets_private(broker: Settings) -> None:
    credentials = stack_credentials_file(broker.stack_dir)
    tls = broker.stack_dir / "kafka" / "tls"
    private = [credentials, broker.stack_dir / "kafka" / "server.properties"]
    private += [tls / "ca.p12", tls / "broker.p12", tls / "truststore.p12"]
    for path in private:
        assert path.stat().st_mode & 0o777 == 0o600, path
    password = json.loads(credentials.read_text())["password"]
    status = run_cli("stack", "status", env=_env(broker))
    assert "SASL_SSL" in status.stdout
    assert password not in status.stdout + status.stderr


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_the_whole_pipeline_runs_authenticated_and_encrypted(
    secured: Settings, mechanism: str, tmp_path: Path
) -> None:
    pipeline = _pipeline(secured, mechanism, tmp_path)
    assert pipeline.env["MINRUNTIME_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert pipeline.env["MINRUNTIME_KAFKA_SASL_MECHANISM"] == mechanism
    try:
        pipeline.create().start()
        pipeline.start_worker("w")
        s = Scene(pipeline, "sec")
        # The queue and the node through `minruntime produce`, as an operator sends them.
        events = tmp_path / "scene.jsonl"
        now = ce.stamp(datetime.now(UTC))
        lines = [ce.queue(s.queue, time=now), node_upserted(s.node("n1"), s.pool, 8)]
        events.write_text("".join(json.dumps(line) + "\n" for line in lines))
        sent = run_cli("produce", str(events), env=pipeline.env)
        assert sent.returncode == 0, sent.stderr
        wait_for(
            lambda: pipeline.scalar(
                "SELECT (SELECT count(*) FROM minruntime.nodes)"
                " * (SELECT count(*) FROM minruntime.queues WHERE name = %s)",
                (s.queue,),
            ),
            60,
            f"the queue and the node\n{pipeline.log_tail()}",
        )
        contender = s.pend(s.job("hi", 4, priority=100, min_available=4))
        victim = s.start(s.job("v", 8, priority=50, annotations=OVERRUN), "n1")

        wait_decisions(pipeline, victim)
        assert decisions(pipeline, victim)[0][0] == "committed"
        [decision_id] = decision_ids(pipeline, victim)
        # Read back from kai.requeue-decisions: the worker's relay published it over SASL_SSL.
        event = wait_published(pipeline, decision_id)
        assert event.event["type"] == "requeue.committed"
        assert event.data["beneficiaries"] == [contender]

        # A record that is not JSON: dead-lettered, and the dead letter read back.
        pipeline.produce("podgroups", [(b"forged", b"not json")])
        [letter] = pipeline.consume("dead_letter", 1, timeout=60)
        assert json.loads(letter.value)["topic"] == pipeline.topics["podgroups"]
        pipeline.check_alive()
    finally:
        pipeline.drop()


def test_a_wrong_password_is_one_line_for_every_command(secured: Settings, tmp_path: Path) -> None:
    pipeline = _pipeline(secured, "SCRAM-SHA-512", tmp_path).create()
    try:
        env = {**pipeline.env, "MINRUNTIME_KAFKA_PASSWORD": "not-the-password"}
        events = tmp_path / "one.jsonl"
        events.write_text(json.dumps({"type": "queue.upserted", "data": {"name": "q"}}) + "\n")
        for command in (
            ("produce", str(events)),
            ("processor",),
            ("requeue-worker",),
            ("replay", "--from-kafka"),
        ):
            line = one_line_error(run_cli(*command, env=env, timeout=120))
            assert "refused the credentials" in line, (command, line)
            assert "not-the-password" not in line
    finally:
        pipeline.drop(verify=False)


def test_an_untrusted_certificate_is_one_line(secured: Settings, tmp_path: Path) -> None:
    if not SYSTEM_CAS.is_file():
        pytest.skip(f"no system CA bundle at {SYSTEM_CAS}")
    pipeline = _pipeline(secured, "SCRAM-SHA-512", tmp_path)
    events = tmp_path / "one.jsonl"
    events.write_text(json.dumps({"type": "queue.upserted", "data": {"name": "q"}}) + "\n")
    env = {**pipeline.env, "MINRUNTIME_KAFKA_SSL_CAFILE": str(SYSTEM_CAS)}
    line = one_line_error(run_cli("produce", str(events), env=env, timeout=120))
    assert "certificate is not trusted" in line


def test_a_plaintext_client_is_refused(secured: Settings, tmp_path: Path) -> None:
    # A forger without credentials: a plain producer cannot even connect...
    with pytest.raises(KafkaConnectionError):
        asyncio.run(_plaintext_send(secured.kafka_bootstrap))
    # ...and the CLI configured for PLAINTEXT says why, in one line.
    pipeline = _pipeline(secured, "SCRAM-SHA-512", tmp_path)
    events = tmp_path / "one.jsonl"
    events.write_text(json.dumps({"type": "queue.upserted", "data": {"name": "q"}}) + "\n")
    env = {**pipeline.env, "MINRUNTIME_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT"}
    line = one_line_error(run_cli("produce", str(events), env=env, timeout=120))
    assert "did not complete the handshake" in line


async def _plaintext_send(bootstrap: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        await producer.start()
        await producer.send_and_wait("kai.requeue-decisions", b'{"type": "requeue.committed"}')
    finally:
        await producer.stop()


def _env(settings: Settings) -> Mapping[str, str]:
    access = kafka_access(settings)
    return {
        "MINRUNTIME_STACK_DIR": str(settings.stack_dir),
        "MINRUNTIME_KAFKA_BOOTSTRAP": access.bootstrap,
        "MINRUNTIME_KAFKA_SECURITY_PROTOCOL": access.protocol,
    }
