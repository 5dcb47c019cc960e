"""One settings object, read from `MINRUNTIME_*` environment variables.

Defaults point at the local stack that `minruntime stack up` starts, so a fresh clone needs
no configuration at all.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from minruntime.events.topics import DEFAULT_TOPICS

KAFKA_VERSION = "4.3.1"
# The local Kubernetes API server (`stack up --kube`): the pins STACK-NOTES verified to build
# from the Go module proxy (etcd 3.5.21 is the version Kubernetes 1.33 itself pins).
KUBE_VERSION = "v1.33.13"
ETCD_VERSION = "v3.5.21"


def project_root() -> Path:
    """The checkout this package is installed from (editable install), else the cwd."""
    candidate = Path(__file__).resolve().parents[2]
    if (candidate / "pyproject.toml").is_file():
        return candidate
    return Path.cwd()


class Settings(BaseSettings):
    """Everything configurable about the service, in one place."""

    model_config = SettingsConfigDict(env_prefix="MINRUNTIME_", extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:9092"
    database_url: str = "postgresql://minruntime:minruntime@127.0.0.1:5433/minruntime"

    stack_dir: Path = Field(default_factory=lambda: project_root() / ".stack")
    cache_dir: Path = Field(default_factory=lambda: Path.home() / ".cache" / "minruntime")
    kafka_version: str = KAFKA_VERSION
    kafka_heap: str = "768m"
    # PostgreSQL's bin directory; unset = the newest >= 15 under /usr/lib/postgresql or on PATH.
    postgres_bindir: Path | None = None
    stack_timeout_seconds: float = 90.0
    # `stack up --kube` (docs/kubernetes.md). Ports unset = Kafka's broker port + 3 for the
    # API server and + 4 for etcd (its peer port is one above), so each checkout's ports
    # follow its Kafka port and never collide with another checkout's.
    kube_version: str = KUBE_VERSION
    etcd_version: str = ETCD_VERSION
    kube_apiserver_port: int | None = Field(default=None, ge=1, le=65535)
    kube_etcd_port: int | None = Field(default=None, ge=1, le=65534)
    kube_build_timeout_seconds: float = Field(default=3600.0, gt=0)

    # Topics (CONTRACT.md §1 default names).
    topic_queues: str = DEFAULT_TOPICS["queues"]
    topic_podgroups: str = DEFAULT_TOPICS["podgroups"]
    topic_nodes: str = DEFAULT_TOPICS["nodes"]
    topic_nominations: str = DEFAULT_TOPICS["nominations"]
    topic_requeue_decisions: str = DEFAULT_TOPICS["requeue_decisions"]
    topic_dead_letter: str = DEFAULT_TOPICS["dead_letter"]
    topic_protection: str = DEFAULT_TOPICS["protection"]
    # Partitions when the processor creates a per-uid topic (kai.queues always has 1).
    podgroup_partitions: int = 6
    node_partitions: int = 3
    nomination_partitions: int = 3
    decision_partitions: int = 3
    protection_partitions: int = 3

    # The stream processor.
    processor_group: str = "minruntime-processor"
    batch_max_events: int = 2000
    batch_within_seconds: float = 0.05
    outbox_poll_seconds: float = 0.25
    db_retry_attempts: int = 8
    state_dir: Path = Field(default_factory=lambda: project_root() / ".stack" / "processor")

    # The requeue worker (docs/requeue-worker.md).
    requeue_interval_seconds: float = Field(default=10.0, gt=0)
    requeue_standby_poll_seconds: float = Field(default=1.0, gt=0)
    requeue_settle_seconds: float = Field(default=0.2, ge=0)
    requeue_conflict_retries: int = Field(default=5, ge=0)
    # Nominator names reported as metric labels; any other name is reported as "other".
    requeue_known_nominators: str = "expectedruntime,proportion,priority,elastic,minruntime"
    # Test hook: exit right after committing a requeue, before publishing it.
    requeue_exit_after_commit: bool = False
    # protection.expired wake-ups (docs/requeue-worker.md): the longest sleep between two
    # checks, and how far back a replica that becomes active looks for missed window ends.
    protection_max_sleep_seconds: float = Field(default=0.5, gt=0)
    protection_catch_up_seconds: float = Field(default=300.0, ge=0)

    # The cluster bridge and the evictor (docs/kubernetes.md). The API server is found through
    # $KUBECONFIG, else the in-cluster service account, else the local stack's kubeconfig.
    kube_namespace: str = "minruntime"  # where the bridge's Lease lives
    kube_scheduler_config: str = "kai-scheduler/kai-scheduler-config"  # namespace/name
    kube_scheduler_node_pool: str = "default"  # the node pool that ConfigMap configures
    kube_node_pool_label: str = "kai.scheduler/node-pool"
    kube_lease_name: str = "minruntime-kube-bridge"
    kube_lease_seconds: float = Field(default=15.0, gt=0)
    kube_identity: str = ""  # the Lease holder's name; "" = hostname-pid
    kube_watch_seconds: int = Field(default=30, gt=0)  # server-side timeout of one watch call
    evictor_group: str = "minruntime-evictor"
    kube_backoff_max_seconds: float = Field(default=10.0, gt=0)

    # Prometheus endpoints (0 = off).
    metrics_host: str = "127.0.0.1"
    processor_metrics_port: int = Field(default=9400, ge=0, le=65535)
    worker_metrics_port: int = Field(default=9401, ge=0, le=65535)

    @property
    def known_nominators(self) -> tuple[str, ...]:
        """The nominator names metrics report by name."""
        return tuple(n.strip() for n in self.requeue_known_nominators.split(",") if n.strip())

    @property
    def kafka_host(self) -> str:
        """Host part of the (first) bootstrap address."""
        return self.kafka_bootstrap.split(",")[0].rsplit(":", 1)[0]

    @property
    def kafka_port(self) -> int:
        """Port of the (first) bootstrap address."""
        return int(self.kafka_bootstrap.split(",")[0].rsplit(":", 1)[1])

    @property
    def kafka_controller_port(self) -> int:
        """The KRaft controller listens one port above the broker."""
        return self.kafka_port + 1

    @property
    def kube_apiserver_port_resolved(self) -> int:
        """The local API server's port (`kube_apiserver_port`, else Kafka's port + 3)."""
        return self.kube_apiserver_port or self.kafka_port + 3

    @property
    def kube_etcd_port_resolved(self) -> int:
        """The local etcd's client port (`kube_etcd_port`, else Kafka's port + 4)."""
        return self.kube_etcd_port or self.kafka_port + 4

    @property
    def kube_dir(self) -> Path:
        """Where `stack up --kube` keeps etcd's data, keys, tokens and the kubeconfig."""
        return self.stack_dir / "kube"

    @property
    def kube_kubeconfig(self) -> Path:
        """The kubeconfig `stack up --kube` writes (admin token, the server's own CA)."""
        return self.kube_dir / "kubeconfig"

    @property
    def database_parts(self) -> DatabaseParts:
        """The pieces of `database_url` the stack needs to create the database."""
        return DatabaseParts.from_url(self.database_url)

    @property
    def sqlalchemy_url(self) -> str:
        """`database_url` with the psycopg 3 driver named, for SQLAlchemy."""
        scheme, _, rest = self.database_url.partition("://")
        if scheme in ("postgresql", "postgres"):
            return f"postgresql+psycopg://{rest}"
        return self.database_url


class DatabaseParts:
    """Host, port, user, password and database name of a PostgreSQL URL."""

    def __init__(self, host: str, port: int, user: str, password: str, dbname: str) -> None:
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.dbname = dbname

    @classmethod
    def from_url(cls, url: str) -> DatabaseParts:
        """Split a `postgresql://user:password@host:port/db` URL."""
        parts = urlsplit(url)
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 5432,
            user=parts.username or "minruntime",
            password=parts.password or "",
            dbname=(parts.path or "/minruntime").lstrip("/") or "minruntime",
        )
