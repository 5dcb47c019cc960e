"""The local broker's secured listener: generated secrets, keystores (keytool), config lines.

`MINRUNTIME_KAFKA_SECURITY_PROTOCOL` chooses the protocol of the broker's one client listener
when `stack up` starts it (PLAINTEXT by default). Everything secret is generated once into the
stack directory, mode 0600: the client user's password (one user, `minruntime`, for SCRAM-SHA-512
and PLAIN), the broker's own PLAIN password (inter-broker traffic), and the keystores' password.
SCRAM credentials live in the KRaft metadata log, so they are added when the storage is
formatted (StorageTool `--add-scram`); PLAIN users are listed in the listener's JAAS config.
With TLS, a private CA and a broker certificate for 127.0.0.1/localhost are made with the JDK's
keytool; the controller listener then takes TLS with client certificates required, so only a
holder of a key signed by that CA (the broker) reaches it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from minruntime.errors import MissingToolError, StackError
from minruntime.kafka_access import stack_ca_file, stack_credentials_file
from minruntime_dev.stack.process import run, write_private

CLIENT_USER = "minruntime"
BROKER_USER = "broker"
_VALIDITY_DAYS = "3650"
_SAN = "SAN=dns:localhost,ip:127.0.0.1"


@dataclass(frozen=True)
class BrokerSecrets:
    """The stack's generated secrets (stored as JSON, mode 0600)."""

    username: str
    password: str
    broker_password: str
    store_password: str
    # False when the storage was formatted before these secrets existed (no SCRAM user).
    scram: bool


def broker_secrets(stack_dir: Path, formatted: bool) -> BrokerSecrets:
    """The stack's secrets, generated on first use (`formatted`: storage already exists)."""
    path = stack_credentials_file(stack_dir)
    if path.is_file():
        return BrokerSecrets(**json.loads(path.read_text()))
    created = BrokerSecrets(
        username=CLIENT_USER,
        # URL-safe: no character that needs quoting in JAAS or in StorageTool's --add-scram.
        password=secrets.token_urlsafe(24),
        broker_password=secrets.token_urlsafe(24),
        store_password=secrets.token_urlsafe(24),
        scram=not formatted,
    )
    write_private(path, json.dumps(asdict(created), indent=2) + "\n")
    return created


def scram_format_arguments(stored: BrokerSecrets) -> list[str]:
    """StorageTool arguments that create the client's SCRAM-SHA-512 credentials."""
    return ["--add-scram", f"SCRAM-SHA-512=[name={stored.username},password={stored.password}]"]


@dataclass(frozen=True)
class Keystores:
    """The broker's PKCS12 keystore and truststore (same generated password)."""

    keystore: Path
    truststore: Path


def ensure_keystores(home: Path, stored: BrokerSecrets) -> Keystores:
    """A CA and a broker certificate for 127.0.0.1/localhost, made once with keytool."""
    tls = home / "tls"
    found = Keystores(tls / "broker.p12", tls / "truststore.p12")
    ca_pem = stack_ca_file(home.parent)
    if found.keystore.is_file() and found.truststore.is_file() and ca_pem.is_file():
        return found
    keytool = shutil.which("keytool")
    if keytool is None:
        raise MissingToolError(
            "keytool (the JDK's) is not installed; the TLS listener needs it once to make the "
            "broker's certificate (install a JDK, e.g. `apt-get install openjdk-17-jdk-headless`)"
        )
    if tls.exists():
        shutil.rmtree(tls)  # a half-made set from an interrupted start
    tls.mkdir(parents=True, mode=0o700)
    ca_store, request, signed = tls / "ca.p12", tls / "broker.csr", tls / "broker.pem"
    # The password reaches keytool through its environment, never its command line (ps).
    env = {**os.environ, "MINRUNTIME_STOREPASS": stored.store_password}
    store = ["-storetype", "PKCS12", "-storepass:env", "MINRUNTIME_STOREPASS"]
    steps = [
        ["-genkeypair", "-alias", "ca", "-keystore", str(ca_store), "-keyalg", "RSA",
         "-keysize", "2048", "-dname", "CN=minruntime local stack CA", "-ext", "bc:c",
         "-validity", _VALIDITY_DAYS],
        ["-exportcert", "-rfc", "-alias", "ca", "-keystore", str(ca_store),
         "-file", str(ca_pem)],
        ["-genkeypair", "-alias", "broker", "-keystore", str(found.keystore), "-keyalg", "RSA",
         "-keysize", "2048", "-dname", "CN=localhost", "-ext", _SAN,
         "-validity", _VALIDITY_DAYS],
        ["-certreq", "-alias", "broker", "-keystore", str(found.keystore),
         "-file", str(request)],
        ["-gencert", "-rfc", "-alias", "ca", "-keystore", str(ca_store), "-infile", str(request),
         "-outfile", str(signed), "-ext", _SAN, "-ext", "KU=digitalSignature,keyEncipherment",
         "-ext", "EKU=serverAuth,clientAuth", "-validity", _VALIDITY_DAYS],
        ["-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem),
         "-keystore", str(found.keystore)],
        ["-importcert", "-noprompt", "-alias", "broker", "-file", str(signed),
         "-keystore", str(found.keystore)],
        ["-importcert", "-noprompt", "-alias", "ca", "-file", str(ca_pem),
         "-keystore", str(found.truststore)],
    ]  # fmt: skip
    for step in steps:
        run([keytool, *step, *store], what=f"keytool {step[0]}", timeout=120, env=env)
    for secret in (ca_store, found.keystore, found.truststore, request, signed):
        secret.chmod(0o600)
    ca_pem.chmod(0o644)  # the CA's certificate is public: clients need it to trust the broker
    return found


def listener_lines(
    protocol: str, host: str, port: int, controller: int, stored: BrokerSecrets | None,
    keystores: Keystores | None,
) -> list[str]:  # fmt: skip
    """server.properties lines for the client listener (named after its protocol)."""
    controller_protocol = "SSL" if keystores is not None else "PLAINTEXT"
    lines = [
        f"listeners={protocol}://{host}:{port},CONTROLLER://{host}:{controller}",
        f"advertised.listeners={protocol}://{host}:{port}",
        f"listener.security.protocol.map=CONTROLLER:{controller_protocol},{protocol}:{protocol}",
        f"inter.broker.listener.name={protocol}",
    ]
    if protocol.startswith("SASL_"):
        if stored is None:
            raise StackError(f"the {protocol} listener needs the stack's generated credentials")
        prefix = f"listener.name.{protocol.lower()}"
        lines += [
            "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
            # The broker talks to itself with PLAIN: its own user needs no SCRAM record.
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            f"{prefix}.plain.sasl.jaas.config="
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{BROKER_USER}" password="{stored.broker_password}" '
            f'user_{BROKER_USER}="{stored.broker_password}" '
            f'user_{stored.username}="{stored.password}";',
            f"{prefix}.scram-sha-512.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        ]
    if keystores is not None and stored is not None:
        lines += [
            "ssl.keystore.type=PKCS12",
            f"ssl.keystore.location={keystores.keystore}",
            f"ssl.keystore.password={stored.store_password}",
            "ssl.truststore.type=PKCS12",
            f"ssl.truststore.location={keystores.truststore}",
            f"ssl.truststore.password={stored.store_password}",
            "ssl.endpoint.identification.algorithm=https",
            "listener.name.controller.ssl.client.auth=required",
        ]
    return lines
