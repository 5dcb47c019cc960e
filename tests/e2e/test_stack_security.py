"""The local stack's PostgreSQL lets in only whom it should, and says no secret.

Another OS user cannot use the socket; the socket's own user gets no password-less login to
the service's roles; TCP wants the right SCRAM password (the old fixed ones are refused, the
superuser has none); the generated passwords live in a 0600 passfile that `stack status`
names instead of printing them; TLS works through the URL's ``sslmode``.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import psycopg
import pytest

from minruntime.settings import OWNER_ROLE, READER_ROLE, Settings, with_role
from minruntime_dev.stack import StackStatus
from minruntime_dev.stack.credentials import read_passwords
from minruntime_dev.stack.postgres import SUPERUSER, PostgresNode
from tests.conftest import run_cli


def _refused(**conninfo: object) -> str:
    try:
        with psycopg.connect(connect_timeout=10, **conninfo):  # type: ignore[arg-type]
            pass
    except psycopg.OperationalError as error:
        return str(error)
    raise AssertionError(f"connected: {conninfo}")


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another OS user needs root")
def test_another_os_user_cannot_use_the_socket(settings: Settings, stack: StackStatus) -> None:
    node = PostgresNode(settings)
    psql = node.bindir() / "psql"
    assert shutil.which("su"), "su is needed to act as another OS user"
    for user, dbname in ((SUPERUSER, "postgres"), (settings.database_parts.user, "minruntime")):
        command = (
            f"{psql} -w -h {node.socket_dir} -p {settings.database_parts.port}"
            f" -U {user} -d {dbname} -Atc 'SELECT current_user'"
        )
        done = subprocess.run(
            ["su", "nobody", "-s", "/bin/sh", "-c", command],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode != 0, done.stdout
        assert done.stdout == ""
        assert "Permission denied" in done.stderr or "authentication failed" in done.stderr


def test_the_socket_trusts_nobody_without_a_password(
    settings: Settings, stack: StackStatus
) -> None:
    node = PostgresNode(settings)
    assert stat.S_IMODE(node.socket_dir.stat().st_mode) == 0o700
    for role in (settings.database_parts.user, OWNER_ROLE, READER_ROLE):
        refusal = _refused(
            host=str(node.socket_dir),
            port=settings.database_parts.port,
            user=role,
            dbname="postgres",
            passfile=os.devnull,
        )
        assert "no password supplied" in refusal or "authentication failed" in refusal, role


def test_tcp_refuses_wrong_and_old_fixed_passwords(settings: Settings, stack: StackStatus) -> None:
    db = settings.database_parts
    tcp = {"host": db.host, "port": db.port, "dbname": db.dbname, "passfile": os.devnull}
    attempts = [
        (SUPERUSER, "postgres"),  # initdb's password in older stacks
        (READER_ROLE, READER_ROLE),  # migration 0002's default
        (OWNER_ROLE, "wrong"),
        (db.user, "wrong"),
    ]
    if not db.password:
        attempts.append((db.user, "minruntime"))  # the old default URL's password
    for user, password in attempts:
        refusal = _refused(user=user, password=password, **tcp)
        assert "authentication failed" in refusal or "rejects connection" in refusal, user


def test_generated_passwords_are_private_and_status_prints_none(
    settings: Settings, stack: StackStatus
) -> None:
    assert stat.S_IMODE(settings.passfile.stat().st_mode) == 0o600
    passwords = read_passwords(settings.passfile)
    assert {OWNER_ROLE, READER_ROLE, settings.database_parts.user} <= set(passwords)
    status = run_cli("stack", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    for password in passwords.values():
        # A password MINRUNTIME_DATABASE_URL chose may be a common word: no URL carries it.
        chosen = password == settings.database_parts.password
        assert (f":{password}@" if chosen else password) not in status.stdout
    lines = dict(
        line.split("=", 1) for line in status.stdout.splitlines() if "_URL=postgresql" in line
    )
    # Each printed URL logs in as its role with no secret in it (libpq reads the passfile).
    for name, role in (
        ("DATABASE_URL", settings.database_parts.user),
        ("OWNER_DATABASE_URL", OWNER_ROLE),
        ("READER_DATABASE_URL", READER_ROLE),
    ):
        with psycopg.connect(lines[name]) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (role,)


@pytest.mark.parametrize("sslmode", ["require", "verify-full"])
def test_tls_through_the_urls_sslmode(settings: Settings, stack: StackStatus, sslmode: str) -> None:
    node = PostgresNode(settings)
    assert node.server_certificate.is_file(), "the stack made no TLS certificate (openssl?)"
    url = with_role(settings.database_url, READER_ROLE, settings.passfile)
    options = {"sslmode": sslmode}
    if sslmode == "verify-full":
        options["sslrootcert"] = str(node.server_certificate)
    with psycopg.connect(url, **options) as conn:
        row = conn.execute(
            "SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ).fetchone()
    assert row is not None
    assert row[0] is True
    assert str(row[1]).startswith("TLS")


def test_verify_full_refuses_a_server_it_cannot_verify(
    settings: Settings, stack: StackStatus
) -> None:
    # No root certificate that signed the server's: verify-full must refuse.
    url = with_role(settings.database_url, READER_ROLE, settings.passfile)
    refusal = _refused(conninfo=url, sslmode="verify-full", sslrootcert=os.devnull)
    assert "certificate" in refusal or "SSL" in refusal
