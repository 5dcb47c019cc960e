"""One settings object, read from `MINRUNTIME_*` environment variables.

Defaults point at the local stack that `minruntime stack up` starts, so a fresh clone needs
no configuration at all. The settings read nothing of that stack's own files but its
passfile: a stack of three brokers or with a standby (`stack up --brokers 3 --pg-standby`)
exports their addresses as `MINRUNTIME_*` lines in `<stack dir>/stack.env`, which the tests
and scripts load into the environment (the development tooling, `minruntime_dev.topology`).
"""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from minruntime.events.topics import DEFAULT_TOPICS
from minruntime.pgurl import PgAddress
from minruntime.retry import MAX_BACKOFF_SECONDS

KAFKA_VERSION = "4.3.1"
# The roles of docs/storage.md#roles-and-privileges: the runtime role is the user of
# MINRUNTIME_DATABASE_URL (`minruntime` by default); these two have fixed names.
OWNER_ROLE = "minruntime_owner"
READER_ROLE = "minruntime_reader"
# libpq password file the local stack writes its generated passwords to (mode 0600).
PASSFILE_NAME = "pgpass"
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


# Topic roles that take replication settings: the wire contract's, and the bridge's ledger.
REPLICATED_ROLES = (*DEFAULT_TOPICS, "ledger")


class TopicReplication(BaseModel):
    """One topic role's replication (unset fields: the service-wide setting)."""

    model_config = ConfigDict(extra="forbid")

    replication_factor: int | None = Field(default=None, ge=1, le=32767)
    min_insync_replicas: int | None = Field(default=None, ge=1, le=32767)


class Settings(BaseSettings):
    """Everything configurable about the service, in one place."""

    model_config = SettingsConfigDict(env_prefix="MINRUNTIME_", extra="ignore")

    kafka_bootstrap: str = "127.0.0.1:9092"
    # Kafka security (docs/deployment.md); every client turns these into its connection through
    # minruntime.kafka_access. PLAINTEXT by default. With SASL and no password, or TLS and no CA
    # file, the credentials and CA that `stack up` generated in the stack directory are used.
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    kafka_sasl_mechanism: Literal["SCRAM-SHA-512", "PLAIN"] = "SCRAM-SHA-512"
    kafka_username: str | None = None
    kafka_password: SecretStr | None = None  # SecretStr: never shown by repr or logs
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None  # client certificate (mutual TLS), optional
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_check_hostname: bool = True
    # The runtime role's URL (processor, requeue worker). Unset: the local stack's, with no
    # password in it: libpq reads the generated one from the stack's passfile.
    database_url: str = "postgresql://minruntime@127.0.0.1:5433/minruntime"
    # The owner's URL (migrate, and the operator commands that build shadow schemas). Unset:
    # the runtime URL with the owner role and the stack's passfile when the local stack has
    # one, else the runtime URL itself (a one-role deployment, as before the split).
    owner_database_url: str | None = None

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
    # Replication of the topics the service creates (docs/deployment.md#kafka-with-several-
    # brokers). Unset: the cluster's `default.replication.factor` and `min.insync.replicas`
    # (the local stack's one broker: 1). Per topic role (queues, podgroups, nodes, nominations,
    # requeue_decisions, dead_letter, protection, ledger), as JSON:
    # MINRUNTIME_TOPIC_REPLICATION='{"dead_letter": {"replication_factor": 3}}'.
    topic_replication_factor: int | None = Field(default=None, ge=1, le=32767)
    topic_min_insync_replicas: int | None = Field(default=None, ge=1, le=32767)
    topic_replication: dict[str, TopicReplication] = Field(default_factory=dict)
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
    # Decode a topic's next full batch while the current one is written (docs/pipeline.md).
    decode_ahead: bool = True
    # Lanes per input topic: its partitions dealt to this many lanes that apply batches at
    # once, each on its own connection (docs/pipeline.md, "Lanes of one topic"); 1: one batch
    # at a time (the default: a live stream's freshness; docs/benchmarks.md).
    processor_lanes_per_topic: int = Field(default=1, ge=1, le=64)
    # While records flow, each fetch of the processor waits up to this long at the broker for
    # more (stream/fetch_pace.py; docs/pipeline.md); 0: answered as soon as one record is there.
    processor_fetch_linger_ms: int = Field(default=5, ge=0, le=500)
    outbox_poll_seconds: float = 0.25
    # How often a topic refused for offsets of another life is re-checked (docs/pipeline.md).
    topic_recheck_seconds: float = Field(default=5.0, gt=0)
    state_dir: Path = Field(default_factory=lambda: project_root() / ".stack" / "processor")
    # Recovery (docs/pipeline.md "Recovery and health"). Static membership: a restarted
    # processor rejoins its consumer group under the same instance id and gets its partitions
    # back without waiting for its dead predecessor's session to end. The id must be stable
    # across restarts and distinct per instance of one group; "" = `<hostname>:<metrics port>`
    # (and no static membership when the metrics port is 0: then nothing identifies it).
    processor_static_membership: bool = True
    processor_instance_id: str = ""
    # How long a dead instance (one not restarted) holds its partitions; broker bounds 6-1800 s.
    processor_session_timeout_seconds: float = Field(default=10.0, ge=6, le=1800)
    processor_heartbeat_interval_seconds: float = Field(default=3.0, gt=0)

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

    # Projection snapshots (docs/audit.md#snapshots): `minruntime snapshot` takes one when
    # this many event-log entries, or this many minutes with at least one new entry, have
    # passed since the newest one. An as-of answer replays at most about this many entries
    # on top of the newest snapshot at or before its instant.
    snapshot_every_events: int = Field(default=5_000, gt=0)
    snapshot_every_minutes: float = Field(default=10.0, gt=0)
    # ... or when the payloads of the entries since the newest one take this many bytes as
    # stored: the tail's cost (decoding and applying grows with the size; ~2,400 entries of
    # the benchmark trace's ~440 bytes, one gang of thousands of pods alone).
    snapshot_every_bytes: int = Field(default=1_048_576, gt=0)

    # The cluster bridge and the evictor (docs/kubernetes.md). The API server is found through
    # $KUBECONFIG, else the in-cluster service account, else the local stack's kubeconfig.
    kube_namespace: str = "minruntime"  # where the bridge's Lease lives
    kube_scheduler_config: str = "kai-scheduler/kai-scheduler-config"  # namespace/name
    kube_scheduler_node_pool: str = "default"  # the node pool that ConfigMap configures
    # The label naming the node pool (KAI shard) of a Node, PodGroup and Queue: KAI's
    # --nodepool-label-key ("" = KAI's every shard sees everything; docs/kubernetes.md).
    kube_node_pool_label: str = "kai.scheduler/node-pool"
    kube_lease_name: str = "minruntime-kube-bridge"
    kube_lease_seconds: float = Field(default=15.0, gt=0)
    kube_identity: str = ""  # the Lease holder's name; "" = hostname-pid
    kube_watch_seconds: int = Field(default=30, gt=0)  # server-side timeout of one watch call
    evictor_group: str = "minruntime-evictor"
    # The evictor (docs/kubernetes.md#the-evictor): decisions are carried out in one lane per
    # podgroup, at most this many API calls at once; a decision not carried out within its
    # node pool's deadline (else the default) is abandoned (requeue.abandoned).
    evictor_concurrency: int = Field(default=16, ge=1, le=256)
    evictor_deadline_seconds: float = Field(default=900.0, ge=1, le=86_400)
    # Node pool -> deadline in seconds (JSON, e.g. {"train": 1800}); each 1 s .. 1 day.
    evictor_pool_deadlines: dict[str, float] = Field(default_factory=dict, max_length=1_000)
    # Decisions read and not yet at an end, at most (then reading waits for the lanes).
    evictor_max_open: int = Field(default=10_000, ge=1, le=1_000_000)
    # How often the evictor reads a PodGroup it asked for a checkpoint (the handshake's wait:
    # docs/kubernetes.md#the-checkpoint-handshake), in seconds.
    evictor_checkpoint_poll_seconds: float = Field(default=1.0, ge=0.05, le=60)
    kube_backoff_max_seconds: float = Field(default=MAX_BACKOFF_SECONDS, gt=0)
    # Only pods of this scheduler are watched (a field selector; "" = every pod).
    kube_scheduler_name: str = "kai-scheduler"
    kube_list_page_size: int = Field(default=500, gt=0, le=10_000)  # objects per list page
    # KAI's evictions (docs/kubernetes.md#evictions-seen-attributed-and-timed): how far apart a
    # pod's deletion and its PodGroup's Evict Event (or last-eviction-timestamp) may be, and
    # how long a deletion waits for one; 0 = never wait.
    kube_eviction_window_seconds: float = Field(default=5.0, ge=0, le=60)
    # Whose Evict Events count (comma-separated; "" = kube_scheduler_name, else kai-scheduler):
    # KAI's recorder reports as its --scheduler-name.
    kube_eviction_components: str = ""
    # The bridge's ledger of what it sent: a compacted topic ("" = "<podgroups topic>.bridge").
    kube_ledger_topic: str = ""
    # The active bridge compares the cluster with the service (as `kube diff`) this often and
    # exports minruntime_kube_drift_* (0 = never; at most a day: the alert wants one an hour).
    kube_drift_seconds: float = Field(default=300.0, ge=0, le=86_400)

    # Prometheus endpoints (0 = off).
    metrics_host: str = "127.0.0.1"
    processor_metrics_port: int = Field(default=9400, ge=0, le=65535)
    worker_metrics_port: int = Field(default=9401, ge=0, le=65535)
    kube_bridge_metrics_port: int = Field(default=9402, ge=0, le=65535)
    kube_evictor_metrics_port: int = Field(default=9403, ge=0, le=65535)

    @model_validator(mode="after")
    def _replication_names_known_roles(self) -> Settings:
        unknown = sorted(set(self.topic_replication) - set(REPLICATED_ROLES))
        if unknown:
            raise ValueError(
                f"MINRUNTIME_TOPIC_REPLICATION names unknown topic roles {unknown}; "
                f"known: {', '.join(REPLICATED_ROLES)}"
            )
        return self

    @model_validator(mode="after")
    def _pool_deadlines_bounded(self) -> Settings:
        for pool, seconds in self.evictor_pool_deadlines.items():
            if not 1 <= seconds <= 86_400 or seconds != seconds:
                raise ValueError(
                    f"MINRUNTIME_EVICTOR_POOL_DEADLINES: the deadline of node pool {pool!r}"
                    f" must be 1 to 86400 seconds, not {seconds}"
                )
        return self

    def evictor_deadline_for(self, pool: str) -> timedelta:
        """How long a committed requeue in ``pool`` may take before it is abandoned."""
        return timedelta(
            seconds=self.evictor_pool_deadlines.get(pool, self.evictor_deadline_seconds)
        )

    @model_validator(mode="after")
    def _default_url_reads_the_stack_passfile(self) -> Settings:
        if "database_url" not in self.model_fields_set:
            self.database_url = with_passfile(self.database_url, self.passfile)
        return self

    @property
    def passfile(self) -> Path:
        """Where the local stack keeps its generated database passwords (libpq format)."""
        return self.stack_dir / PASSFILE_NAME

    @property
    def owner_url(self) -> str:
        """The URL of the role that owns and migrates the schema (see owner_database_url)."""
        if self.owner_database_url:
            return self.owner_database_url
        if self.passfile.is_file():
            return owner_url_for(self.database_url, self.passfile)
        return self.database_url

    @property
    def owner_sqlalchemy_url(self) -> str:
        """`owner_url` with the psycopg 3 driver named, for SQLAlchemy."""
        return PgAddress.parse(self.owner_url).sqlalchemy()

    @property
    def processor_group_instance_id(self) -> str | None:
        """The processor's static member id in its consumer group (None: dynamic membership)."""
        if not self.processor_static_membership:
            return None
        if self.processor_instance_id:
            return self.processor_instance_id
        if not self.processor_metrics_port:
            return None
        return f"{socket.gethostname()}:{self.processor_metrics_port}"

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
    def kube_ledger_topic_resolved(self) -> str:
        """The bridge's ledger topic (`kube_ledger_topic`, else the podgroups topic's name +
        `.bridge`: a pipeline with its own topics has its own ledger)."""
        return self.kube_ledger_topic or f"{self.topic_podgroups}.bridge"

    @property
    def kube_eviction_components_resolved(self) -> tuple[str, ...]:
        """The components whose Evict Events the bridge reads (see kube_eviction_components)."""
        named = tuple(
            part.strip() for part in self.kube_eviction_components.split(",") if part.strip()
        )
        return named or (self.kube_scheduler_name or "kai-scheduler",)

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
        return PgAddress.parse(self.database_url).sqlalchemy()


def with_passfile(url: str, passfile: Path) -> str:
    """``url`` naming ``passfile`` (libpq's ``passfile`` parameter) unless it has a password."""
    address = PgAddress.parse(url)
    if address.password is not None or "passfile" in address.params:
        return url
    return address.with_params(passfile=str(passfile)).uri()


def with_role(url: str, role: str, passfile: Path | None = None) -> str:
    """``url`` for another role of the same servers and database: no password, the passfile."""
    address = PgAddress.parse(url).as_role(role)
    return address.with_params(passfile=str(passfile) if passfile is not None else None).uri()


def owner_url_for(runtime_url: str, passfile: Path) -> str:
    """The owner role's URL on the server and database of ``runtime_url``."""
    return with_role(runtime_url, OWNER_ROLE, passfile)


def without_password(url: str, passfile: Path) -> str:
    """``url`` as it may be printed: the password replaced by the passfile that holds it."""
    address = PgAddress.parse(url)
    if address.password is None:
        return url
    return with_role(url, address.user or "", passfile)


class DatabaseParts(NamedTuple):
    """Host, port, user, password and database name of a PostgreSQL URL (its first server:
    the local stack has one)."""

    host: str
    port: int
    user: str
    password: str
    dbname: str

    @classmethod
    def from_url(cls, url: str) -> DatabaseParts:
        """The parts of any address libpq accepts (minruntime.pgurl)."""
        address = PgAddress.parse(url)
        return cls(
            host=address.host,
            port=address.port,
            user=address.user or "minruntime",
            password=address.password or "",
            dbname=address.dbname or "minruntime",
        )
