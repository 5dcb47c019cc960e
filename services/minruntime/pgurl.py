"""PostgreSQL addresses in every form libpq accepts, parsed once by libpq itself.

Operators paste what their provider shows them: a URI with one host, a URI with several
(`postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write`), hosts as query parameters
(`?host=h1,h2&port=5432,5433`, or SQLAlchemy's repeated `?host=h1:5432&host=h2:5433`), a
`key=value` connection string, or just a service name (`postgresql:///?service=minruntime`,
resolved through `pg_service.conf` when connecting). `PgAddress.parse` reads all of them with
libpq's own parser (psycopg's `conninfo_to_dict`), so the service accepts exactly what `psql`
accepts; the other methods write the address back as a libpq URI, as SQLAlchemy's URL, or as a
line that names the servers without the password.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from minruntime.errors import ConfigError

_URI_SCHEMES = ("postgresql://", "postgres://")
_ADDRESS_KEYS = frozenset({"host", "hostaddr", "port", "user", "password", "dbname"})


@dataclass(frozen=True, slots=True)
class PgAddress:
    """One PostgreSQL address: its servers in order, the role and database, everything else."""

    hosts: tuple[str, ...] = ()
    """Host names, IP addresses or socket directories; empty: libpq's default."""
    ports: tuple[str, ...] = ()
    """One port for every host, one port for all, or none (5432)."""
    user: str | None = None
    password: str | None = None
    dbname: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    """Every other libpq keyword: passfile, target_session_attrs, sslmode, service, ..."""

    @classmethod
    def parse(cls, conninfo: str) -> PgAddress:
        """Read a URI or a `key=value` string; one-line `ConfigError` when libpq refuses it."""
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict

        try:
            parsed = conninfo_to_dict(_join_repeated_hosts(conninfo))
        except ProgrammingError as error:
            reason = " ".join(str(error).split())
            raise ConfigError(f"not a PostgreSQL address libpq accepts: {reason}") from None
        values = {key: str(value) for key, value in parsed.items() if value is not None}
        hosts = _split(values.get("host", ""))
        ports = _split(values.get("port", ""))
        if len(ports) == 1 and len(hosts) > 1:
            ports = ports * len(hosts)  # libpq: one port for every host
        if len(ports) > 1 and len(ports) != len(hosts):
            raise ConfigError(
                f"the PostgreSQL address names {len(hosts)} host(s) but {len(ports)} ports"
            )
        for port in ports:
            if port and not (port.isdigit() and 0 < int(port) <= 65535):
                raise ConfigError(f"the PostgreSQL address has an invalid port {port[:40]!r}")
        return cls(
            hosts=hosts,
            ports=ports,
            user=values.get("user"),
            password=values.get("password"),
            dbname=values.get("dbname"),
            params={k: v for k, v in values.items() if k not in _ADDRESS_KEYS},
        )

    @property
    def servers(self) -> tuple[tuple[str, int], ...]:
        """(host, port) of every server, in the order libpq tries them."""
        hosts = self.hosts or ("",)
        ports = self.ports or ("",)
        if len(ports) == 1:
            ports = ports * len(hosts)
        return tuple(
            (host, int(port) if port else 5432) for host, port in zip(hosts, ports, strict=True)
        )

    @property
    def host(self) -> str:
        """The first server's host (a local stack has exactly one)."""
        return self.servers[0][0] or "127.0.0.1"

    @property
    def port(self) -> int:
        return self.servers[0][1]

    def with_params(self, **params: str | None) -> PgAddress:
        """The same address with these keywords set (None: removed)."""
        merged = {k: v for k, v in {**self.params, **params}.items() if v is not None}
        return replace(self, params=merged)

    def as_role(self, role: str) -> PgAddress:
        """The same servers and database for another role, without a password."""
        return replace(self, user=role, password=None)

    def uri(self) -> str:
        """A `postgresql://` URI libpq reads back into the same address."""
        userinfo = ""
        if self.user is not None:
            userinfo = quote(self.user, safe="")
            if self.password is not None:
                userinfo += ":" + quote(self.password, safe="")
            userinfo += "@"
        netloc = ",".join(
            _uri_host(host) + (f":{port}" if port else "")
            for host, port in _pairs(self.hosts, self.ports)
        )
        path = "/" + quote(self.dbname, safe="") if self.dbname is not None else "/"
        query = urlencode(self.params, safe="/", quote_via=quote)
        return f"postgresql://{userinfo}{netloc}{path}" + (f"?{query}" if query else "")

    def sqlalchemy(self) -> str:
        """SQLAlchemy's URL for the psycopg 3 driver (several hosts as `host=h1,h2&port=..`)."""
        from sqlalchemy.engine import URL

        query: dict[str, str] = dict(self.params)
        host: str | None = None
        port: int | None = None
        if len(self.hosts) == 1 and not self.hosts[0].startswith("/") and len(self.ports) <= 1:
            host, port = self.servers[0][0], int(self.ports[0]) if self.ports else None
        else:
            if self.hosts:
                query["host"] = ",".join(self.hosts)
            if self.ports:
                query["port"] = ",".join(self.ports)
        url = URL.create(
            "postgresql+psycopg",
            username=self.user,
            password=self.password,
            host=host,
            port=port,
            database=self.dbname,
            query=query,
        )
        return url.render_as_string(hide_password=False)

    def shown(self) -> str:
        """The servers and database for a log line: `h1:5432,h2:5433/db` (never a password)."""
        servers = ",".join(f"{host or 'local socket'}:{port}" for host, port in self.servers)
        service = self.params.get("service")
        where = f"{servers}/{self.dbname or self.user or ''}"
        return f"service {service} ({where})" if service else where


def _split(value: str) -> tuple[str, ...]:
    return tuple(value.split(",")) if value else ()


def _pairs(hosts: tuple[str, ...], ports: tuple[str, ...]) -> list[tuple[str, str]]:
    if not hosts:
        return [("", ports[0])] if ports else []
    if len(ports) == 1:
        return [(host, ports[0]) for host in hosts]
    return list(zip(hosts, ports or ("",) * len(hosts), strict=True))


def _uri_host(host: str) -> str:
    if host.startswith("/"):
        return quote(host, safe="")  # a socket directory
    if ":" in host:
        return f"[{host}]"  # IPv6
    return host


def _join_repeated_hosts(conninfo: str) -> str:
    """SQLAlchemy's multi-host form `?host=h1:p1&host=h2:p2` as libpq's `host=h1,h2&port=p1,p2`
    (libpq itself would keep only the last `host`)."""
    if not conninfo.startswith(_URI_SCHEMES) or "?" not in conninfo:
        return conninfo
    head, _, query = conninfo.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    hosts = [value for key, value in pairs if key == "host"]
    if len(hosts) < 2 or any(key == "port" for key, _ in pairs):
        return conninfo
    names, ports = [], []
    for value in hosts:
        parsed = urlsplit(f"//{value}")
        try:
            port = parsed.port
        except ValueError:
            return conninfo  # let libpq say what is wrong
        names.append(parsed.hostname or value)
        ports.append(str(port) if port else "")
    rest = [(key, value) for key, value in pairs if key != "host"]
    rest.append(("host", ",".join(names)))
    if any(ports):
        rest.append(("port", ",".join(ports)))
    return f"{head}?{urlencode(rest, safe='/,', quote_via=quote)}"
