"""How the local stack was started, remembered in its directory (`<stack dir>/topology.json`),
and the addresses it exports for its clients (`<stack dir>/stack.env`).

`minruntime stack up --brokers 3 --pg-standby` writes both; `stack status`, `stack down` and
the next `stack up` without flags read the topology. The clients' addresses follow it: an
address that names the stack's first broker alone stands for every broker of the cluster, and
one that names the stack's first PostgreSQL server alone stands for both servers, with
`target_session_attrs=read-write` (libpq connects to whichever is the primary, before and
after a failover). Any other address is left as it was given. The service's settings read
none of this: `stack up` and `stack failover` write the resolved addresses to `stack.env` as
`MINRUNTIME_KAFKA_BOOTSTRAP` and `MINRUNTIME_DATABASE_URL` (shell syntax: `set -a; .
.stack/stack.env`), which tests/conftest.py and the scripts load. A stack started without the
flags has neither file, and nothing changes.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from minruntime.errors import ConfigError
from minruntime.pgurl import PgAddress

TOPOLOGY_FILE = "topology.json"
ENV_FILE = "stack.env"
# The settings a stack's topology resolves, and only those (never a password: the URL names
# the stack's passfile).
EXPORTED = ("MINRUNTIME_KAFKA_BOOTSTRAP", "MINRUNTIME_DATABASE_URL")


@dataclass(frozen=True)
class StackTopology:
    """The brokers and PostgreSQL servers of one local stack, by address (host:port)."""

    brokers: tuple[str, ...] = ()
    """Every broker of a cluster, node 1 first; empty: the single broker of `stack up`."""
    postgres: tuple[str, ...] = ()
    """The first server, then its standby; empty: one server, no standby."""
    primary: int = 0
    """Which of `postgres` is the primary now (a failover moves it to the other)."""
    fenced: bool = False
    """The other server is a fenced former primary (the next `stack up` re-clones it)."""

    @property
    def cluster(self) -> bool:
        """True for a Kafka cluster (`--brokers 3`)."""
        return len(self.brokers) > 1

    @property
    def standby(self) -> bool:
        """True when PostgreSQL has a streaming standby (`--pg-standby`)."""
        return len(self.postgres) > 1

    @property
    def default(self) -> bool:
        """True for the stack of a plain `stack up`: one broker, one server."""
        return not self.cluster and not self.standby

    def bootstrap_for(self, bootstrap: str) -> str:
        """Every broker when `bootstrap` names the first one alone, else `bootstrap`."""
        if self.cluster and bootstrap.strip() == self.brokers[0]:
            return ",".join(self.brokers)
        return bootstrap

    def database_url_for(self, url: str) -> str:
        """Both servers, read-write, when `url` names the first one alone, else `url`."""
        if not self.standby:
            return url
        address = PgAddress.parse(url)
        if len(address.hosts) != 1 or _address(*address.servers[0]) != self.postgres[0]:
            return url
        hosts, ports = zip(*(server.rsplit(":", 1) for server in self.postgres), strict=True)
        expanded = replace(address, hosts=tuple(hosts), ports=tuple(ports))
        if "target_session_attrs" not in address.params:
            expanded = expanded.with_params(target_session_attrs="read-write")
        return expanded.uri()

    def base_bootstrap(self, bootstrap: str) -> str:
        """What `bootstrap_for` expanded, given back: the first broker alone."""
        if self.cluster and bootstrap.strip() == ",".join(self.brokers):
            return self.brokers[0]
        return bootstrap

    def base_database_url(self, url: str) -> str:
        """What `database_url_for` expanded, given back: the first server alone."""
        if not self.standby:
            return url
        address = PgAddress.parse(url)
        if tuple(_address(*server) for server in address.servers) != self.postgres:
            return url
        first = replace(address, hosts=address.hosts[:1], ports=address.ports[:1])
        if first.params.get("target_session_attrs") == "read-write":
            first = first.with_params(target_session_attrs=None)
        return first.uri()


def _address(host: str, port: int) -> str:
    return f"{host}:{port}"


def topology_file(stack_dir: Path) -> Path:
    return stack_dir / TOPOLOGY_FILE


def read_topology(stack_dir: Path) -> StackTopology:
    """The remembered topology; the default one (one broker, one server) when there is none."""
    path = topology_file(stack_dir)
    try:
        data = json.loads(path.read_text())
        return StackTopology(
            brokers=tuple(str(b) for b in data.get("brokers", ())),
            postgres=tuple(str(p) for p in data.get("postgres", ())),
            primary=int(data.get("primary", 0)),
            fenced=bool(data.get("fenced", False)),
        )
    except FileNotFoundError:
        return StackTopology()
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise ConfigError(
            f"{path} is not a topology `minruntime stack up` wrote ({error}); "
            "delete it and run `minruntime stack up` with the flags you want"
        ) from None


def write_topology(stack_dir: Path, topology: StackTopology) -> None:
    """Remember `topology` (the default one removes the file: a plain stack has none)."""
    text = json.dumps(asdict(topology), indent=2) + "\n"
    _replace(topology_file(stack_dir), None if topology.default else text)


def _replace(path: Path, text: str | None) -> None:
    """`path` holds `text` at once, never half of it (None: `path` is removed)."""
    if text is None:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(text)
    os.replace(temporary, path)


def env_file(stack_dir: Path) -> Path:
    return stack_dir / ENV_FILE


def write_stack_env(stack_dir: Path, topology: StackTopology, addresses: dict[str, str]) -> None:
    """Export `addresses` (`EXPORTED` names to values) for a stack of `topology`; the default
    topology removes the file (a plain stack's clients need nothing but the defaults)."""
    unknown = sorted(set(addresses) - set(EXPORTED))
    if unknown:
        raise ValueError(f"a stack exports only {', '.join(EXPORTED)}, not {unknown}")
    lines = [
        "# Written by `minruntime stack up` and `stack failover`: this stack's every broker and",
        "# server. Load it with `set -a; . <this file>; set +a` (tests/conftest.py does).",
        *(f"{name}={shlex.quote(value)}" for name, value in addresses.items()),
    ]
    _replace(env_file(stack_dir), None if topology.default else "\n".join(lines) + "\n")


def read_stack_env(stack_dir: Path) -> dict[str, str]:
    """The addresses a stack exported (`write_stack_env`); none when it has no file."""
    path = env_file(stack_dir)
    if not path.is_file():
        return {}
    lines = path.read_text().splitlines()
    return dict(_exported(path, line) for line in lines if line.strip() and line[0] != "#")


def _exported(path: Path, line: str) -> tuple[str, str]:
    name, _, value = line.partition("=")
    try:
        words = shlex.split(value) if value else [""]
    except ValueError:  # an unbalanced quote
        words = []
    if name not in EXPORTED or len(words) != 1:
        raise ConfigError(
            f"{path} is not a file `minruntime stack up` wrote (line {line[:60]!r}); "
            "delete it and run `minruntime stack up`"
        )
    return name, words[0]
