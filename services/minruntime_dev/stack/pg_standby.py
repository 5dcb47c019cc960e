"""A streaming standby of the stack's PostgreSQL (`stack up --pg-standby`), and failover.

Two servers from the same binaries: the stack's own (`postgres`, on the URL's port, 5433) and
`postgres-2` on the next port (5434). The standby is a `pg_basebackup` of the primary through
a physical replication slot, streaming over TCP as the role `minruntime_replication` (its
password is generated into the stack's passfile, and copied to a passfile of the server's own
account); `hot_standby` is on, so it answers reads. Roles and passwords are replicated: the
stack's passfile logs in on either server.

Replication is synchronous: `synchronous_commit = on` with `synchronous_standby_names` naming
the standby, so a commit is acknowledged only once the standby has flushed it to disk, and a
failover loses no acknowledged transaction. A synchronous standby that is down makes the
primary's commits wait, so the primary turns synchronous only once its standby streams (each
`stack up`), and `stack failover` leaves the new primary, which has no standby, asynchronous
until the next `stack up` gives it one.

`stack failover` fences the primary first (stops it, then marks it a standby of the new one:
if anything starts it again it is read-only), then promotes the standby. The stack's URLs name
both servers with `target_session_attrs=read-write`, so they keep working. The next
`stack up` re-clones the fenced server as the new primary's standby.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from psycopg.conninfo import make_conninfo

from minruntime.errors import StackError
from minruntime.settings import Settings
from minruntime_dev.stack.access import REPLICATION_CONF, REPLICATION_ROLE
from minruntime_dev.stack.credentials import passfile_text, read_passwords
from minruntime_dev.stack.postgres import PostgresNode
from minruntime_dev.stack.process import Health, wait_until
from minruntime_dev.topology import StackTopology

Say = Callable[[str], None]

STANDBY_NAME = "postgres-2"
APPLICATION_NAME = "minruntime_standby"
# A fenced former primary may reach the new primary, but is never taken for its standby.
FENCED_APPLICATION_NAME = "minruntime_fenced"
SLOT = "minruntime_standby"
SERVER_PASSFILE = "replication.pgpass"
# A slot keeps WAL for a standby that is away; this much at most, then the standby is re-cloned.
MAX_SLOT_WAL = "2GB"


def _setting(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def primary_conf(*, synchronous: bool) -> str:
    """The primary's part: a commit waits for the named standby's flush when `synchronous`."""
    names = APPLICATION_NAME if synchronous else ""
    return (
        "# Written by `minruntime stack up` / `stack failover`: this server is the primary.\n"
        "synchronous_commit = on\n"
        f"synchronous_standby_names = {_setting(names)}\n"
        f"max_slot_wal_keep_size = {_setting(MAX_SLOT_WAL)}\n"
    )


def standby_conf(host: str, port: int, passfile: Path, *, fenced: bool = False) -> str:
    """A standby's part: stream from host:port (through the slot, unless `fenced`), answer
    reads, and never wait for a standby of its own once promoted."""
    conninfo = make_conninfo(
        host=host,
        port=port,
        user=REPLICATION_ROLE,
        passfile=str(passfile),
        application_name=FENCED_APPLICATION_NAME if fenced else APPLICATION_NAME,
    )
    what = "a fenced former primary, read-only" if fenced else "the standby"
    return (
        f"# Written by `minruntime stack up` / `stack failover`: this server is {what}.\n"
        f"primary_conninfo = {_setting(conninfo)}\n"
        f"primary_slot_name = {_setting('' if fenced else SLOT)}\n"
        "hot_standby = on\n"
        "synchronous_standby_names = ''\n"
    )


class PostgresPair:
    """The primary and its standby; which is which follows the topology."""

    def __init__(self, settings: Settings, topology: StackTopology) -> None:
        port = settings.database_parts.port
        self.settings = settings
        self.topology = topology
        self.servers = (
            PostgresNode(settings, "postgres", port, replication=True),
            PostgresNode(settings, STANDBY_NAME, port + 1, replication=True),
        )

    @property
    def primary(self) -> PostgresNode:
        """The server that accepts writes (after a failover: the former standby)."""
        return self.servers[self.topology.primary]

    @property
    def standby(self) -> PostgresNode:
        """The other one: the standby, or a fenced former primary."""
        return self.servers[1 - self.topology.primary]

    def preflight(self) -> None:
        """Fail before anything starts: binaries present, both ports free (unless running)."""
        for server in self.servers:
            server.preflight()

    # -- up --------------------------------------------------------------------------------
    def up(self, timeout: float, say: Say) -> StackTopology:
        """Start both servers (the standby cloned first when it is missing or fenced) and make
        replication synchronous once the standby streams; the topology, no longer fenced."""
        for server in self.servers:
            server.forget_an_earlier_stack()
        primary, standby = self.primary, self.standby
        if primary is self.servers[1] and not (primary.data_dir / "PG_VERSION").is_file():
            raise StackError(f"the primary's data ({primary.data_dir}) is gone")
        if self.topology.fenced or not (standby.data_dir / "standby.signal").is_file():
            self._make_standby(timeout, say)
        else:
            # The primary keeps waiting for its standby, which starts next; the role
            # bootstrap's commits come once it streams.
            self._start(primary, timeout, say)
            self._write_standby_conf(standby, self._replication_password(), fenced=False)
            self._start(standby, timeout, say)
            self._wait_streaming(timeout)
            primary.create_database()
            self._ensure_slot(fresh=False)
        self._wait_streaming(timeout)
        primary.write_owned(primary.data_dir / REPLICATION_CONF, primary_conf(synchronous=True))
        primary.reload()
        say(f"{standby.title} streams from port {primary.port}: synchronous replication on")
        return replace(self.topology, fenced=False)

    def _make_standby(self, timeout: float, say: Say) -> None:
        primary, standby = self.primary, self.standby
        if standby.is_running():
            standby.stop()  # a fenced former primary, or a server that is no standby
        primary.init()
        primary.prepare_dirs()
        # Asynchronous until the standby streams: the role bootstrap's commits must not wait.
        primary.write_owned(primary.data_dir / REPLICATION_CONF, primary_conf(synchronous=False))
        self._start(primary, timeout, say)
        password = primary.create_database()[REPLICATION_ROLE]
        self._ensure_slot(fresh=True)
        self._clone(password, timeout)
        say(f"{standby.title} cloned from port {primary.port} (pg_basebackup)")
        self._write_standby_conf(standby, password, fenced=False)
        self._start(standby, timeout, say)

    @staticmethod
    def _start(server: PostgresNode, timeout: float, say: Say) -> None:
        say(f"{server.title} started" if server.start(timeout) else f"{server.title} running")

    def _wait_streaming(self, timeout: float) -> None:
        if not wait_until(self._streams, timeout, 0.25):
            raise StackError(
                f"the standby on port {self.standby.port} does not stream from port "
                f"{self.primary.port} after {timeout:.0f}s (its log: {self.standby.log_file}); "
                "`stack up --no-pg-standby`, then `stack up --pg-standby`, makes it anew"
            )

    def _streams(self) -> bool:
        with self.primary.admin_connection() as conn:
            row = conn.execute(
                "SELECT state FROM pg_stat_replication WHERE application_name = %s",
                (APPLICATION_NAME,),
            ).fetchone()
        return row is not None and row[0] == "streaming"

    def _ensure_slot(self, *, fresh: bool) -> None:
        with self.primary.admin_connection() as conn:
            exists = conn.execute(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (SLOT,)
            ).fetchone()
            if exists is not None and fresh and exists[0] is None:
                conn.execute("SELECT pg_drop_replication_slot(%s)", (SLOT,))
                exists = None
            if exists is None:
                conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (SLOT,))

    def _server_passfile(self, server: PostgresNode, password: str) -> Path:
        """The replication role's password, where the server's own account can read it."""
        path = server.home / SERVER_PASSFILE
        server.write_owned(path, passfile_text({REPLICATION_ROLE: password}))
        return path

    def _clone(self, password: str, timeout: float) -> None:
        standby, primary = self.standby, self.primary
        if standby.data_dir.exists():
            shutil.rmtree(standby.data_dir)
        standby.prepare_dirs()
        passfile = self._server_passfile(standby, password)
        conninfo = make_conninfo(
            host=self.settings.database_parts.host,
            port=primary.port,
            user=REPLICATION_ROLE,
            passfile=str(passfile),
            application_name="minruntime_basebackup",
        )
        standby.run_tool(
            "pg_basebackup", "-D", str(standby.data_dir), "-X", "stream", "-S", SLOT,
            "-c", "fast", "-w", "-d", conninfo,
            what="pg_basebackup (the standby)",
            timeout=max(timeout, 120),
        )  # fmt: skip

    def _write_standby_conf(self, server: PostgresNode, password: str, *, fenced: bool) -> None:
        passfile = self._server_passfile(server, password)
        host = self.settings.database_parts.host
        other = self.servers[1 - self.servers.index(server)]
        server.write_owned(server.data_dir / "standby.signal", "")
        server.write_owned(
            server.data_dir / REPLICATION_CONF,
            standby_conf(host, other.port, passfile, fenced=fenced),
        )

    # -- failover, down ----------------------------------------------------------------------
    def failover(self, timeout: float, say: Say) -> StackTopology:
        """Fence the primary, promote the standby; the new topology (to be remembered)."""
        old, new = self.primary, self.standby
        if self.topology.fenced:
            raise StackError(
                f"the server on port {new.port} is a fenced former primary, not a standby: "
                "`minruntime stack up` re-clones it first"
            )
        if not new.is_running():
            raise StackError(
                f"the standby (port {new.port}) is not running, so there is nothing to promote: "
                "`minruntime stack up` starts it"
            )
        # Fence first: two servers must never both accept writes.
        if old.is_running():
            try:
                old.stop("fast")
            except StackError:
                old.stop("immediate")
            say(f"{old.title} (the primary) stopped")
        password = self._replication_password()
        self._write_standby_conf(old, password, fenced=True)
        say(f"{old.title} fenced: if started, it is a read-only standby of port {new.port}")
        began = time.monotonic()
        new.promote(timeout)
        new.write_owned(new.data_dir / REPLICATION_CONF, primary_conf(synchronous=False))
        new.reload()
        say(
            f"{new.title} promoted ({time.monotonic() - began:.1f}s); no standby until the next "
            "`minruntime stack up`, so its commits wait for none"
        )
        return replace(self.topology, primary=1 - self.topology.primary, fenced=True)

    def _replication_password(self) -> str:
        password = read_passwords(self.settings.passfile).get(REPLICATION_ROLE)
        if password is None:
            raise StackError(
                f"{self.settings.passfile} has no password for {REPLICATION_ROLE}: "
                "run `minruntime stack up --pg-standby` first"
            )
        return password

    def detach(self, say: Say) -> None:
        """Leave one server (`--no-pg-standby`): the standby stopped, its slot dropped, the
        primary no longer waiting for it."""
        if self.topology.primary != 0:  # refused before anything started (plan_topology)
            raise StackError(f"the primary is the server on port {self.primary.port}")
        standby = self.standby
        if standby.stop():
            say(f"{standby.title} (the standby) stopped")
        if standby.data_dir.exists():
            shutil.rmtree(standby.data_dir)  # a later --pg-standby clones it anew
        primary = self.primary
        (primary.data_dir / REPLICATION_CONF).unlink(missing_ok=True)
        if primary.is_running():
            primary.reload()
            with primary.admin_connection() as conn:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    " WHERE slot_name = %s",
                    (SLOT,),
                )

    def down(self, say: Say) -> None:
        """Stop the primary first (its last WAL reaches the standby), then the other."""
        other = "fenced former primary" if self.topology.fenced else "standby"
        for server, role in ((self.primary, "primary"), (self.standby, other)):
            stopped = server.stop()
            say(f"{server.title} ({role}) " + ("stopped" if stopped else "was not running"))

    # -- health ----------------------------------------------------------------------------
    def health(self) -> list[tuple[str, Health]]:
        """Each server, named `postgresql` and `postgresql-2`, with its part in the pair."""
        return [(self.name_of(server), self._health_of(server)) for server in self.servers]

    def name_of(self, server: PostgresNode) -> str:
        """Its name in `stack status`: `postgresql` (the URL's port), `postgresql-2` (next)."""
        return "postgresql" if server is self.servers[0] else "postgresql-2"

    def _health_of(self, server: PostgresNode) -> Health:
        found = server.health()
        if server is self.standby and self.topology.fenced:
            state = "read-only" if found.running else "stopped"
            detail = f"fenced former primary, {state}; `stack up` re-clones it as the standby"
            return replace(found, healthy=False, detail=detail)
        if not found.healthy:
            return found
        if server is self.primary:
            healthy, role = True, self._primary_role()
        else:
            healthy, role = self._standby_role(server)
        return replace(found, healthy=healthy, detail=f"{role}; {found.detail}")

    def _primary_role(self) -> str:
        with self.primary.admin_connection() as conn:
            waits = conn.execute("SHOW synchronous_standby_names").fetchone()
            row = conn.execute(
                "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
                (APPLICATION_NAME,),
            ).fetchone()
        if row is not None:
            return f"primary, standby {row[0]} ({row[1]})"
        if waits and waits[0]:
            return "primary, its synchronous standby is NOT connected: commits wait for it"
        return "primary, no standby (asynchronous)"

    def _standby_role(self, server: PostgresNode) -> tuple[bool, str]:
        with server.admin_connection() as conn:
            row = conn.execute(
                "SELECT pg_is_in_recovery(), (SELECT status FROM pg_stat_wal_receiver)"
            ).fetchone()
        if row is None or not row[0]:
            return False, "NOT in recovery: a second primary"
        return True, f"standby, {row[1] or 'not receiving'} from port {self.primary.port}"
