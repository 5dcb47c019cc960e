"""How every Kafka client of the service connects: bootstrap servers plus security, in one place.

The settings name a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), a SASL
mechanism (SCRAM-SHA-512 or PLAIN), a user, a password, a CA file, an optional client
certificate and whether the broker's host name is checked. `kafka_access(settings)` resolves
them once into a `KafkaAccess`; its `client_kwargs()` are what every aiokafka producer, consumer
and admin client is built with (faust gets the same values as broker credentials, in
`minruntime.stream.app`: the audit layer must not import faust, so the translation is there).

With SASL and no password, or TLS and no CA file, the credentials and CA that `stack up`
generated in the stack directory are used, so the local stack needs one setting only.

A client that cannot connect is diagnosed here too (`start_client`): aiokafka only logs why a
bootstrap failed, so one direct connection attempt names the cause — credentials refused,
certificate not trusted, a listener that speaks another protocol — in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from minruntime.errors import UserError
from minruntime.settings import Settings

_PROBE_TIMEOUT_MS: Final = 10_000
_UNREACHABLE: Final = "cannot reach"


class KafkaAccessError(UserError):
    """A Kafka client cannot connect: wrong settings, credentials or certificate; one line."""


class KafkaUnreachableError(KafkaAccessError):
    """No broker answers at all: an outage, which waiting may cure (unlike wrong credentials)."""


def stack_credentials_file(stack_dir: Path) -> Path:
    """The client credentials `stack up` generates for its SASL listener (mode 0600)."""
    return stack_dir / "kafka" / "credentials.json"


def stack_ca_file(stack_dir: Path) -> Path:
    """The certificate of the CA that signed the local broker's certificate (public)."""
    return stack_dir / "kafka" / "tls" / "ca.pem"


@dataclass(frozen=True)
class KafkaAccess:
    """Where the brokers are and how to talk to them (resolved settings)."""

    bootstrap: str
    protocol: str = "PLAINTEXT"
    mechanism: str = "SCRAM-SHA-512"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    cafile: Path | None = None
    certfile: Path | None = None
    keyfile: Path | None = None
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for the brokers (None without TLS); verifies the broker always."""
        if not self.uses_tls:
            return None
        try:
            context = ssl.create_default_context(
                cafile=str(self.cafile) if self.cafile is not None else None
            )
            context.check_hostname = self.check_hostname
            if self.certfile is not None:
                context.load_cert_chain(
                    str(self.certfile), str(self.keyfile) if self.keyfile else None
                )
        except (OSError, ssl.SSLError) as error:
            raise KafkaAccessError(
                f"cannot load the Kafka TLS files ({error}): check MINRUNTIME_KAFKA_SSL_CAFILE, "
                "MINRUNTIME_KAFKA_SSL_CERTFILE and MINRUNTIME_KAFKA_SSL_KEYFILE"
            ) from None
        return context

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for any aiokafka client (producer, consumer, admin)."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.protocol,
        }
        if self.uses_tls:
            kwargs["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            kwargs["sasl_mechanism"] = self.mechanism
            kwargs["sasl_plain_username"] = self.username
            kwargs["sasl_plain_password"] = self.password
        return kwargs

    def describe(self) -> str:
        """How the clients connect, without secrets (for logs and error messages)."""
        if self.uses_sasl:
            return f"{self.protocol}, {self.mechanism} as {self.username!r}"
        return self.protocol


def kafka_access(settings: Settings) -> KafkaAccess:
    """Resolve the Kafka settings (falling back to the local stack's generated secrets)."""
    protocol = settings.kafka_security_protocol
    username = settings.kafka_username
    password = (
        settings.kafka_password.get_secret_value() if settings.kafka_password is not None else None
    )
    cafile = settings.kafka_ssl_cafile
    if protocol.startswith("SASL_") and (username is None or password is None):
        stack_user, stack_password = _stack_credentials(settings.stack_dir)
        username = username or stack_user
        password = password if password is not None else stack_password
    if protocol in ("SSL", "SASL_SSL") and cafile is None:
        generated = stack_ca_file(settings.stack_dir)
        # None: the system's trusted CAs (a cluster with a publicly signed certificate).
        cafile = generated if generated.is_file() else None
    if protocol.startswith("SASL_") and not (username and password):
        raise KafkaAccessError(
            f"MINRUNTIME_KAFKA_SECURITY_PROTOCOL={protocol} needs MINRUNTIME_KAFKA_USERNAME and "
            "MINRUNTIME_KAFKA_PASSWORD (or a stack started with that protocol)"
        )
    if (settings.kafka_ssl_keyfile is not None) and settings.kafka_ssl_certfile is None:
        raise KafkaAccessError("MINRUNTIME_KAFKA_SSL_KEYFILE needs MINRUNTIME_KAFKA_SSL_CERTFILE")
    return KafkaAccess(
        bootstrap=settings.kafka_bootstrap,
        protocol=protocol,
        mechanism=settings.kafka_sasl_mechanism,
        username=username,
        password=password,
        cafile=cafile,
        certfile=settings.kafka_ssl_certfile,
        keyfile=settings.kafka_ssl_keyfile,
        check_hostname=settings.kafka_ssl_check_hostname,
    )


def _stack_credentials(stack_dir: Path) -> tuple[str | None, str | None]:
    try:
        stored = json.loads(stack_credentials_file(stack_dir).read_text())
    except (OSError, ValueError):
        return None, None
    return stored.get("username"), stored.get("password")


class _Startable(Protocol):
    async def start(self) -> Any: ...


async def start_client(client: _Startable, access: KafkaAccess) -> None:
    """`client.start()`, or a one-line `KafkaAccessError` that says why it cannot connect."""
    from aiokafka.errors import KafkaError

    # aiokafka logs each failed bootstrap attempt; the error raised below says it once.
    quiet = _DropBootstrapFailures()
    client_log = logging.getLogger("aiokafka")  # aiokafka.client logs under this name
    client_log.addFilter(quiet)
    try:
        await client.start()
    except (KafkaError, OSError, ssl.SSLError, TimeoutError) as error:
        # Closed now: an unclosed client warns on stderr when it is collected.
        close = getattr(client, "stop", None) or getattr(client, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
        reason = await diagnose(access, error)
        if reason.startswith(_UNREACHABLE):
            raise KafkaUnreachableError(reason) from None
        raise KafkaAccessError(reason) from None
    finally:
        client_log.removeFilter(quiet)


class _DropBootstrapFailures(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Unable connect to")


async def diagnose(access: KafkaAccess, error: BaseException | None = None) -> str:
    """Why a client of `access` cannot connect, in one line (one direct connection attempt)."""
    from aiokafka.conn import create_conn
    from aiokafka.errors import (
        AuthenticationFailedError,
        IllegalSaslStateError,
        KafkaConnectionError,
        SaslAuthenticationFailed,
        UnsupportedSaslMechanismError,
    )

    host, _, port = access.bootstrap.split(",")[0].strip().rpartition(":")
    where = f"Kafka at {access.bootstrap} ({access.describe()})"
    kwargs = access.client_kwargs()
    kwargs.pop("bootstrap_servers")
    try:
        conn = await asyncio.wait_for(
            create_conn(host, int(port), request_timeout_ms=_PROBE_TIMEOUT_MS, **kwargs),
            _PROBE_TIMEOUT_MS / 1000,
        )
    except (AuthenticationFailedError, SaslAuthenticationFailed) as failed:
        return (
            f"{where} refused the credentials ({_first_line(failed)}): check MINRUNTIME_KAFKA_"
            "USERNAME, MINRUNTIME_KAFKA_PASSWORD and MINRUNTIME_KAFKA_SASL_MECHANISM"
        )
    except UnsupportedSaslMechanismError as unsupported:
        return f"{where}: {_first_line(unsupported)}; set MINRUNTIME_KAFKA_SASL_MECHANISM"
    except ssl.SSLCertVerificationError as untrusted:
        return (
            f"{where}: the broker's TLS certificate is not trusted "
            f"({untrusted.verify_message or untrusted.reason}): set MINRUNTIME_KAFKA_SSL_CAFILE "
            "to the CA that signed it"
        )
    except ssl.SSLError as handshake:
        return (
            f"{where}: the TLS handshake failed ({handshake.reason or handshake}): does the "
            "listener expect MINRUNTIME_KAFKA_SECURITY_PROTOCOL?"
        )
    except (TimeoutError, IllegalSaslStateError, KafkaConnectionError) as unexpected:
        # A PLAINTEXT client on a TLS or SASL listener: the broker closes or never answers.
        return (
            f"{where} did not complete the handshake ({_first_line(unexpected) or 'no answer'}):"
            " does MINRUNTIME_KAFKA_SECURITY_PROTOCOL match the broker's listener?"
        )
    except OSError as unreachable:
        return f"{_UNREACHABLE} {where}: {unreachable.strerror or unreachable}"
    conn.close()
    return f"cannot use {where}: {_first_line(error) if error else 'unknown error'}"


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(text.split())
