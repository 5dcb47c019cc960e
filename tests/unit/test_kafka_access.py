"""Settings become every Kafka client's connection in one place (minruntime.kafka_access)."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import faust
import pytest
from pydantic import SecretStr

from minruntime.kafka_access import (
    KafkaAccessError,
    kafka_access,
    stack_ca_file,
    stack_credentials_file,
)
from minruntime.settings import Settings
from minruntime.stream.app import broker_credentials
from minruntime_dev.stack.kafka_security import BrokerSecrets, Keystores, listener_lines

CA = Path(ssl.get_default_verify_paths().cafile or "/etc/ssl/certs/ca-certificates.crt")


def _settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(stack_dir=tmp_path, kafka_bootstrap="127.0.0.1:19092", **values)  # type: ignore[arg-type]


def test_plaintext_is_the_default_and_adds_nothing(tmp_path: Path) -> None:
    access = kafka_access(_settings(tmp_path))
    assert access.client_kwargs() == {
        "bootstrap_servers": "127.0.0.1:19092",
        "security_protocol": "PLAINTEXT",
    }
    assert broker_credentials(access) is None


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_sasl_ssl_gives_every_client_and_faust_the_same_credentials(
    tmp_path: Path, mechanism: str
) -> None:
    if not CA.is_file():
        pytest.skip("no system CA bundle")
    settings = _settings(
        tmp_path,
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism=mechanism,
        kafka_username="svc",
        kafka_password=SecretStr("s3cret"),
        kafka_ssl_cafile=CA,
    )
    access = kafka_access(settings)
    kwargs = access.client_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert (kwargs["sasl_mechanism"], kwargs["sasl_plain_username"]) == (mechanism, "svc")
    assert kwargs["sasl_plain_password"] == "s3cret"
    context = kwargs["ssl_context"]
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    credentials = broker_credentials(access)
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.protocol.value == "SASL_SSL"
    assert credentials.mechanism.value == mechanism
    assert (credentials.username, credentials.password) == ("svc", "s3cret")


def test_the_password_is_never_shown(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path,
        kafka_security_protocol="SASL_PLAINTEXT",
        kafka_username="svc",
        kafka_password=SecretStr("s3cret"),
    )
    access = kafka_access(settings)
    for text in (repr(settings), str(settings), repr(access), access.describe()):
        assert "s3cret" not in text


def test_without_a_password_the_stacks_generated_credentials_and_ca_are_used(
    tmp_path: Path,
) -> None:
    credentials = stack_credentials_file(tmp_path)
    credentials.parent.mkdir(parents=True)
    credentials.write_text(json.dumps({"username": "minruntime", "password": "generated"}))
    if CA.is_file():
        stack_ca_file(tmp_path).parent.mkdir(parents=True)
        stack_ca_file(tmp_path).write_bytes(CA.read_bytes())
    access = kafka_access(_settings(tmp_path, kafka_security_protocol="SASL_SSL"))
    assert (access.username, access.password) == ("minruntime", "generated")
    assert access.cafile == (stack_ca_file(tmp_path) if CA.is_file() else None)


def test_sasl_without_credentials_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(KafkaAccessError, match="needs MINRUNTIME_KAFKA_USERNAME"):
        kafka_access(_settings(tmp_path, kafka_security_protocol="SASL_SSL"))


def test_a_missing_ca_file_is_one_line(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path, kafka_security_protocol="SSL", kafka_ssl_cafile=tmp_path / "none.pem"
    )
    with pytest.raises(KafkaAccessError, match="MINRUNTIME_KAFKA_SSL_CAFILE"):
        kafka_access(settings).client_kwargs()


def test_the_sasl_ssl_listener_config() -> None:
    stored = BrokerSecrets("minruntime", "pw", "bpw", "spw", scram=True)
    keystores = Keystores(Path("/s/broker.p12"), Path("/s/truststore.p12"))
    lines = listener_lines("SASL_SSL", "127.0.0.1", 9092, 9093, stored, keystores)
    assert "listeners=SASL_SSL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093" in lines
    assert "listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL" in lines
    assert "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN" in lines
    assert "listener.name.controller.ssl.client.auth=required" in lines
    plain = next(line for line in lines if ".plain.sasl.jaas.config=" in line)
    assert 'user_minruntime="pw"' in plain
    # No PLAINTEXT listener is left for a client that has no credentials.
    assert not any(line.startswith("listeners=") and "PLAINTEXT" in line for line in lines)


def test_the_plaintext_listener_config_is_unchanged() -> None:
    lines = listener_lines("PLAINTEXT", "127.0.0.1", 9092, 9093, None, None)
    assert lines == [
        "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
        "advertised.listeners=PLAINTEXT://127.0.0.1:9092",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "inter.broker.listener.name=PLAINTEXT",
    ]
