"""Who may connect to the local PostgreSQL, and how: pg_hba.conf, pg_ident.conf, TLS.

- The unix socket: only the OS user who runs the stack (its directory is 0700 and the socket
  0700), and only as the superuser ``postgres``, by peer authentication mapped from that OS
  user (root too, when the server runs as ``postgres``). Nobody else, no trust.
- TCP: SCRAM-SHA-256 passwords for the service's roles, never for the superuser (it has no
  password at all). TLS is offered with a self-signed certificate (``sslmode=require``;
  ``verify-full`` with the certificate copied to ``<stack dir>/postgres-server.crt``).

- Replication (``stack up --pg-standby`` only): the role ``minruntime_replication`` may open
  replication connections over TCP with its SCRAM password, and nothing else: no database.

Everything here is rewritten by every ``stack up``, which is how a stack made by older code
(``local all all trust``, socket mode 777, superuser password ``postgres``) is upgraded.
"""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path

from minruntime_dev.stack.process import run

IDENT_MAP = "minruntime"
SECURITY_CONF = "minruntime-security.conf"
INCLUDE_LINE = f"include_if_exists = '{SECURITY_CONF}'"
# A server of a stack with a standby: its part, primary or standby
# (minruntime_dev.stack.pg_standby).
REPLICATION_CONF = "minruntime-replication.conf"
REPLICATION_INCLUDE_LINE = f"include_if_exists = '{REPLICATION_CONF}'"
REPLICATION_ROLE = "minruntime_replication"


def hba_text(superuser: str, replication_role: str | None = None) -> str:
    """pg_hba.conf: peer (mapped) for the superuser on the socket, SCRAM for the rest on TCP;
    with a `replication_role`, its replication connections (SCRAM, TCP) and no database."""
    replication = (
        f"host    replication  {replication_role}  all  scram-sha-256\n"
        f"local   all  {replication_role}  reject\n"
        f"host    all  {replication_role}  all  reject\n"
        if replication_role
        else ""
    )
    return (
        "# Written by `minruntime stack up` (minruntime_dev/stack/access.py); rewritten on each"
        " up.\n"
        "# TYPE  DATABASE  USER  ADDRESS  METHOD\n"
        f"local   all  {superuser}  peer map={IDENT_MAP}\n"
        f"{replication}"
        "local   all  all  scram-sha-256\n"
        f"host    all  {superuser}  all  reject\n"
        "host    all  all  all  scram-sha-256\n"
    )


def ident_text(os_users: list[str], superuser: str) -> str:
    """pg_ident.conf: the OS users that may be the superuser over the socket."""
    lines = [f"{IDENT_MAP}  {user}  {superuser}\n" for user in dict.fromkeys(os_users)]
    return "# Written by `minruntime stack up`.\n" + "".join(lines)


def security_conf(cert: Path | None, key: Path | None) -> str:
    """Settings included from postgresql.conf (read at start; ssl also on reload)."""
    text = (
        "# Written by `minruntime stack up`.\n"
        "unix_socket_permissions = 0700\n"
        "password_encryption = 'scram-sha-256'\n"
    )
    if cert is not None and key is not None:
        text += f"ssl = on\nssl_cert_file = '{cert}'\nssl_key_file = '{key}'\n"
    else:
        text += "ssl = off\n"
    return text


def make_certificate(directory: Path, host: str) -> tuple[Path, Path] | None:
    """A self-signed server certificate for ``host`` (and localhost/127.0.0.1), made once.

    None when openssl is not installed: the stack then runs without TLS.
    """
    cert, key = directory / "server.crt", directory / "server.key"
    if cert.is_file() and key.is_file():
        return cert, key
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    names = {"DNS:localhost", "IP:127.0.0.1", _san(host)}
    run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650",
         "-subj", "/CN=minruntime-local-postgres",
         "-addext", "subjectAltName=" + ",".join(sorted(names)),
         "-keyout", str(key), "-out", str(cert)],
        what="openssl (the PostgreSQL TLS certificate)",
    )  # fmt: skip
    key.chmod(0o600)
    return cert, key


def _san(host: str) -> str:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"DNS:{host}"
    return f"IP:{host}"
