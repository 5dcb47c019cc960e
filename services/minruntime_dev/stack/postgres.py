"""A PostgreSQL server of the checkout's own, from the machine's PostgreSQL binaries.

PostgreSQL refuses to run as root. When `stack up` runs as root (CI, containers), the server
runs as the `postgres` system user and its data directory lives under
`/var/tmp/minruntime/<checkout hash>/` (the checkout itself may sit in a directory that user
cannot enter); `.stack/postgres` is then a symlink to it.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minruntime.errors import MissingToolError, StackError
from minruntime.pgurl import PgAddress
from minruntime.settings import Settings
from minruntime_dev.stack import access
from minruntime_dev.stack.process import Health, require_free_port, run, tail, write_private

if TYPE_CHECKING:
    import psycopg

MIN_MAJOR = 15
SUPERUSER = "postgres"
_NOT_INSTALLED = (
    "PostgreSQL >= 15 binaries (initdb, pg_ctl, postgres) are not installed; "
    "install Debian's `postgresql` package (apt-get install postgresql)"
)


def find_bindir() -> Path | None:
    """The newest PostgreSQL >= 15 bin directory on this machine, if any."""
    candidates: list[tuple[int, Path]] = []
    for bindir in Path("/usr/lib/postgresql").glob("*/bin"):
        if (bindir / "initdb").is_file() and bindir.parent.name.isdigit():
            candidates.append((int(bindir.parent.name), bindir))
    on_path = shutil.which("initdb")
    if on_path:
        bindir = Path(on_path).resolve().parent
        version = _major_version(bindir)
        if version is not None:
            candidates.append((version, bindir))
    usable = sorted(c for c in candidates if c[0] >= MIN_MAJOR)
    return usable[-1][1] if usable else None


def _major_version(bindir: Path) -> int | None:
    try:
        out = subprocess.run(
            [str(bindir / "postgres"), "--version"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    match = re.search(r"(\d+)\.", out)
    return int(match.group(1)) if match else None


def install_postgresql() -> None:
    """Install Debian's PostgreSQL packages with apt-get (root only)."""
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise MissingToolError(_NOT_INSTALLED)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = [apt, "install", "-y", "-q", "--no-install-recommends", "postgresql"]
    try:
        run(install, what="apt-get install postgresql", env=env, timeout=900)
    except StackError:
        run([apt, "update", "-q"], what="apt-get update", env=env, timeout=600)
        run(install, what="apt-get install postgresql", env=env, timeout=900)


class PostgresNode:
    """A local database server: init, start, create the database, check, stop.

    Without arguments, the stack's server: `.stack/postgres` on the port of
    MINRUNTIME_DATABASE_URL. With `--pg-standby` the stack has a second one, `postgres-2` on
    the next port (minruntime_dev.stack.pg_standby); `replication` then lets its replication
    connections in.
    """

    def __init__(
        self,
        settings: Settings,
        name: str = "postgres",
        port: int | None = None,
        *,
        replication: bool = False,
    ) -> None:
        self.settings = settings
        self.db = settings.database_parts
        self.name = name
        self.port = port or self.db.port
        self.replication = replication
        self.as_root = os.geteuid() == 0
        self.link = settings.stack_dir / name
        self.home = self._home(name)
        # One certificate for the stack's servers (all on one host): the first server's.
        self.tls_dir = self._home("postgres") / "tls"
        self.data_dir = self.home / "data"
        self.socket_dir = self.home / "run"
        self.log_file = self.home / "postgres.log"
        self._bindir: Path | None = None

    def _home(self, name: str) -> Path:
        if not self.as_root:
            return self.settings.stack_dir / name
        digest = hashlib.sha1(str(self.settings.stack_dir.resolve()).encode()).hexdigest()[:12]
        return Path("/var/tmp/minruntime") / digest / name

    # -- binaries -----------------------------------------------------------------------
    def bindir(self, install: bool = False) -> Path:
        """Where initdb/pg_ctl live; install Debian's package when asked and missing."""
        configured = self.settings.postgres_bindir
        if configured is not None:
            if not (configured / "initdb").is_file() or not (configured / "pg_ctl").is_file():
                raise MissingToolError(
                    f"no PostgreSQL binaries (initdb, pg_ctl) in {configured} "
                    "(MINRUNTIME_POSTGRES_BINDIR)"
                )
            return configured
        if self._bindir is None:
            found = find_bindir()
            if found is None and install:
                install_postgresql()
                found = find_bindir()
            if found is None:
                raise MissingToolError(_NOT_INSTALLED)
            self._bindir = found
        return self._bindir

    def _as_owner(self, *cmd: str) -> list[str]:
        if not self.as_root:
            return list(cmd)
        runuser = shutil.which("runuser") or next(
            (p for p in ("/usr/sbin/runuser", "/sbin/runuser") if Path(p).is_file()), None
        )
        if runuser is None:
            raise MissingToolError("runuser (util-linux) is needed to run PostgreSQL as root")
        return [runuser, "-u", SUPERUSER, "--", *cmd]

    def _ensure_owner_account(self) -> None:
        if not self.as_root:
            return
        try:
            pwd.getpwnam(SUPERUSER)
        except KeyError:
            run(
                ["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", SUPERUSER],
                what="creating the postgres system user",
            )

    def prepare_dirs(self) -> None:
        """Its home and socket directory, owned by the server's account."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(parents=True, exist_ok=True)
        if self.as_root:
            self.settings.stack_dir.mkdir(parents=True, exist_ok=True)
            if not self.link.is_symlink() and not self.link.exists():
                self.link.symlink_to(self.home, target_is_directory=True)
            for path in (self.home.parent.parent, self.home.parent):
                os.chmod(path, 0o755)
            self._give_to_server(self.home, self.socket_dir, self.data_dir, self.log_file)

    def _give_to_server(self, *paths: Path) -> None:
        """As root: make the server's account own ``paths`` (those that exist)."""
        if not self.as_root:
            return
        account = pwd.getpwnam(SUPERUSER)
        for path in paths:
            if path.exists():
                os.chown(path, account.pw_uid, account.pw_gid)

    def forget_an_earlier_stack(self) -> None:
        """As root, drop data left under this stack directory's path by a deleted one.

        Run as root, the data lives outside the stack directory (the server's own account
        must own it), at a path derived from the stack directory's path and linked from it.
        A stack directory made anew at the same path (a fresh clone where an earlier one
        was) has no link yet: what is found there belonged to a stack directory that was
        deleted, and that directory's Kafka data went with it. Adopted, the database would
        keep offsets of topics that no longer exist (the processor rightly refuses such a
        topic until it is re-baselined). A server still running on it is adopted instead:
        its stack directory was deleted under it, but its data is in use.
        """
        if not self.as_root or self.link.is_symlink() or not self.home.exists():
            return
        if self.is_running():
            return
        shutil.rmtree(self.home)

    def init(self) -> None:
        """initdb once, with settings suited to a small development machine."""
        if (self.data_dir / "PG_VERSION").is_file():
            return
        bindir = self.bindir(install=True)
        self._ensure_owner_account()
        self.prepare_dirs()
        run(
            self._as_owner(
                str(bindir / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER,
                # The superuser has no password: it logs in over the socket only (peer).
                # configure() writes the real pg_hba.conf before the first start.
                "--auth-local=peer", "--auth-host=reject", "-E", "UTF8", "--no-locale",
            ),
            what="initdb",
            timeout=300,
        )  # fmt: skip
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                # Address, port and socket dir are passed at each start (they follow
                # MINRUNTIME_DATABASE_URL); only sizing lives here.
                "\n# minruntime local stack\n"
                "max_connections = 200\n"
                "shared_buffers = 256MB\n"
                "work_mem = 16MB\n"
                "max_wal_size = 2GB\n"
                "logging_collector = off\n"
                "log_min_messages = warning\n"
            )

    def configure(self) -> None:
        """Write who may connect and how (minruntime_dev.stack.access); upgrades older stacks."""
        conf = self.data_dir / "postgresql.conf"
        includes = {access.INCLUDE_LINE: "socket, passwords and TLS"}
        if self.replication:
            includes[access.REPLICATION_INCLUDE_LINE] = "primary or standby (stack up --pg-standby)"
        text = conf.read_text()
        for line, why in includes.items():
            if line not in text:
                with conf.open("a") as out:
                    out.write(f"\n# minruntime: {why}\n{line}\n")
        tls = access.make_certificate(self.tls_dir, self.db.host)
        os_users = [pwd.getpwuid(os.geteuid()).pw_name, SUPERUSER]
        replication_role = access.REPLICATION_ROLE if self.replication else None
        files = {
            self.data_dir / "pg_hba.conf": access.hba_text(SUPERUSER, replication_role),
            self.data_dir / "pg_ident.conf": access.ident_text(os_users, SUPERUSER),
            self.data_dir / access.SECURITY_CONF: access.security_conf(*(tls or (None, None))),
        }
        for path, text in files.items():
            path.write_text(text)
            path.chmod(0o600)
        self.socket_dir.chmod(0o700)
        self._give_to_server(*files, *(tls or ()), self.tls_dir, self.socket_dir)
        self.server_certificate.unlink(missing_ok=True)
        if tls is not None:
            # The public half, for clients' sslrootcert (sslmode=verify-full).
            shutil.copyfile(tls[0], self.server_certificate)
            self.server_certificate.chmod(0o644)

    @property
    def server_certificate(self) -> Path:
        """Where clients find the server's (self-signed) certificate, when TLS is on."""
        return self.settings.stack_dir / "postgres-server.crt"

    # -- lifecycle ------------------------------------------------------------------------
    def run_tool(self, tool: str, *args: str, what: str, timeout: float = 300) -> str:
        """Run one of PostgreSQL's programs (pg_basebackup, ...) as the server's account."""
        return run(self._as_owner(str(self.bindir() / tool), *args), what=what, timeout=timeout)

    def write_owned(self, path: Path, text: str) -> None:
        """Write a file only the server's account can read (mode 0600, owned by it)."""
        write_private(path, text)
        self._give_to_server(path)

    def _pg_ctl(self, action: str, *options: str, timeout: float = 120) -> str:
        return run(
            self._as_owner(
                str(self.bindir() / "pg_ctl"), action, "-D", str(self.data_dir), *options
            ),
            what=f"pg_ctl {action}",
            timeout=timeout,
        )

    def is_running(self) -> bool:
        if not (self.data_dir / "PG_VERSION").is_file():
            return False
        try:
            bindir = self.bindir()
        except MissingToolError:
            return False
        done = subprocess.run(
            self._as_owner(str(bindir / "pg_ctl"), "-D", str(self.data_dir), "status"),
            capture_output=True,
            text=True,
        )
        return done.returncode == 0

    def pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[0])
        except (FileNotFoundError, PermissionError, ValueError, IndexError):
            return None

    def preflight(self) -> None:
        """Fail before anything starts: binaries present (installed if possible), port free."""
        if self.is_running():
            return
        self.bindir(install=True)
        require_free_port(self.db.host, self.port, self.title, "MINRUNTIME_DATABASE_URL")

    @property
    def title(self) -> str:
        """How messages name it: "PostgreSQL", or with its port when the stack has two."""
        return f"PostgreSQL on port {self.port}" if self.replication else "PostgreSQL"

    def start(self, timeout: float) -> bool:
        """Start the server unless it already runs; True when it was started now.

        Either way the access rules are (re)written first; a running server reloads them.
        """
        self.forget_an_earlier_stack()
        self.preflight()
        self.init()
        self.prepare_dirs()
        self.configure()
        if self.is_running():
            self._pg_ctl("reload")
            return False
        try:
            options = (
                f"-c listen_addresses={self.db.host} -c port={self.port} "
                f"-c unix_socket_directories={self.socket_dir}"
            )
            wait = ("-w", "-t", str(int(timeout)))
            self._pg_ctl(
                "start", "-o", options, "-l", str(self.log_file), *wait, timeout=timeout + 10
            )
        except StackError as exc:
            raise StackError(f"{exc} (log: {tail(self.log_file, 3)})") from exc
        return True

    def admin_connection(self, dbname: str = "postgres") -> psycopg.Connection[tuple[Any, ...]]:
        """The superuser over the owner-only socket (peer authentication), autocommit."""
        import psycopg

        return psycopg.connect(
            host=str(self.socket_dir),
            port=self.port,
            user=SUPERUSER,
            dbname=dbname,
            autocommit=True,
        )

    def create_database(self) -> dict[str, str]:
        """Create (or upgrade) the roles, their passwords and the database (idempotent);
        each role's password."""
        from minruntime_dev.stack.roles import bootstrap_roles

        return bootstrap_roles(self, self.settings, replication=self.replication)

    def stop(self, mode: str = "fast") -> bool:
        """Stop the server (fast shutdown); True when one was running."""
        if not self.is_running():
            return False
        self._pg_ctl("stop", "-m", mode, "-w")
        return True

    def reload(self) -> None:
        self._pg_ctl("reload")

    def promote(self, timeout: float) -> None:
        """Promote a standby to a primary; return once it accepts writes."""
        self._pg_ctl("promote", "-w", "-t", str(int(timeout)), timeout=timeout + 10)

    @property
    def url(self) -> str:
        """The service's runtime URL for this server alone (the stack's URL itself when the
        stack has one server)."""
        if not self.replication:
            return self.settings.database_url
        address = PgAddress.parse(self.settings.database_url)
        alone = replace(address, hosts=(self.db.host,), ports=(str(self.port),))
        return alone.with_params(target_session_attrs=None).uri()

    def health(self) -> Health:
        """Is the server running, and does the service's own login answer `SELECT 1`?"""
        if not self.is_running():
            return Health(False, False, None, "not running")
        import psycopg

        try:
            with psycopg.connect(self.url, connect_timeout=5) as conn:
                row = conn.execute("SHOW server_version").fetchone()
        except psycopg.Error as exc:
            return Health(True, False, self.pid(), f"not answering: {exc}".strip())
        version = row[0] if row else "?"
        return Health(True, True, self.pid(), f"PostgreSQL {version}, data {self.data_dir}")
