"""A real Kubernetes API server in the local stack: etcd + kube-apiserver on 127.0.0.1.

Only the API server runs (no kubelet, scheduler or controller-manager): enough for the
cluster bridge to watch KAI's objects and for the evictor to evict, bind and patch, as a real
cluster would answer them. Everything of one checkout lives in `<stack_dir>/kube/`: etcd's
data, the serving certificate the API server generates for itself, the service-account key
pair, the static token file and the kubeconfig. The binaries come from `kube_build`.
"""

from __future__ import annotations

import json
import secrets
import shutil
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from minruntime.errors import MissingToolError, StackError
from minruntime.settings import Settings
from minruntime_dev.stack import process
from minruntime_dev.stack.kube_build import KubeBinaries

HOST = "127.0.0.1"
ADMIN_USER = "minruntime-admin"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
_PORT_HINT = "MINRUNTIME_KUBE_APISERVER_PORT / MINRUNTIME_KUBE_ETCD_PORT"


class _Daemon:
    """One long-running binary of the Kubernetes part: its pid file and log."""

    def __init__(self, home: Path, name: str) -> None:
        self.name = name
        self.pid_file = home / f"{name}.pid"
        self.log_file = home / f"{name}.log"

    @property
    def pid(self) -> int | None:
        return process.read_pid(self.pid_file)

    def is_running(self) -> bool:
        return process.pid_alive(self.pid)

    def start(self, command: Sequence[str], cwd: Path) -> None:
        process.spawn_daemon(command, self.log_file, self.pid_file, cwd)

    def stop(self, timeout: float) -> bool:
        return process.stop_daemon(self.pid_file, timeout)

    def log_tail(self) -> str:
        return process.tail(self.log_file, 3)

    def health(self, answer: Callable[[], str | None], silent: str) -> process.Health:
        """Not running; running and answering (``answer()``: what it said); else ``silent``."""
        if not self.is_running():
            return process.Health(False, False, None, "not running")
        said = answer()
        return process.Health(True, said is not None, self.pid, said or silent)


class KubeNode:
    """etcd and kube-apiserver of this checkout: configure, start, check, stop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.binaries = KubeBinaries(settings)
        self.home = settings.kube_dir
        self.pki = self.home / "pki"
        self.etcd_data = self.home / "etcd-data"
        self.token_file = self.home / "tokens.csv"
        self.kubeconfig = settings.kube_kubeconfig
        # Present from a successful `up --kube` until `down`: `status` then lists etcd and the
        # API server (unhealthy if they died), and prints KUBECONFIG.
        self.enabled_marker = self.home / "enabled"
        self.etcd = _Daemon(self.home, "etcd")
        self.apiserver = _Daemon(self.home, "kube-apiserver")

    @property
    def serving_cert(self) -> Path:
        """The self-signed certificate kube-apiserver writes into its --cert-dir."""
        return self.pki / "apiserver.crt"

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.settings.kube_apiserver_port_resolved}"

    @property
    def enabled(self) -> bool:
        """True when the Kubernetes part is part of the stack (or still running)."""
        return (
            self.enabled_marker.is_file() or self.etcd.is_running() or self.apiserver.is_running()
        )

    # -- lifecycle ------------------------------------------------------------------------
    def preflight(self) -> None:
        """Fail before anything starts: Go (unless built), openssl, ports free."""
        if not self.binaries.built:
            self.binaries.go()
        if not (self.pki / "sa.key").is_file() and shutil.which("openssl") is None:
            raise MissingToolError(
                "openssl is not installed; `stack up --kube` needs it once for the "
                "service-account key pair (install it, e.g. `apt-get install openssl`)"
            )
        ports = self.settings
        if not self.etcd.is_running():
            process.require_free_port(HOST, ports.kube_etcd_port_resolved, "etcd", _PORT_HINT)
            process.require_free_port(
                HOST, ports.kube_etcd_port_resolved + 1, "etcd's peer port (+1)", _PORT_HINT
            )
        if not self.apiserver.is_running():
            process.require_free_port(
                HOST, ports.kube_apiserver_port_resolved, "kube-apiserver", _PORT_HINT
            )

    def start(self, say: Callable[[str], None], timeout: float) -> bool:
        """Build once, then start etcd and the API server unless they run; True if started."""
        self.preflight()
        if self.etcd.is_running() and self.apiserver.is_running():
            self.wait_ready(timeout)
            return False
        self.binaries.ensure(say)
        self.home.mkdir(parents=True, exist_ok=True)
        self._write_credentials()
        if not self.etcd.is_running():
            self.etcd.start(self._etcd_command(), self.home)
        if not process.wait_until(
            lambda: self._etcd_healthy() or not self.etcd.is_running(), timeout
        ):
            raise StackError(f"etcd did not answer in {timeout:.0f}s: {self.etcd.log_tail()}")
        if not self.etcd.is_running():
            raise StackError(f"etcd exited during start-up: {self.etcd.log_tail()}")
        if not self.apiserver.is_running():
            self.apiserver.start(self._apiserver_command(), self.home)
        self.wait_ready(timeout)
        return True

    def wait_ready(self, timeout: float) -> None:
        """Return once the API server answers /readyz; then write the kubeconfig."""
        ready = process.wait_until(
            lambda: self._apiserver_ready() or not self.apiserver.is_running(), timeout, 0.5
        )
        if not self.apiserver.is_running():
            raise StackError(f"kube-apiserver exited during start-up: {self.apiserver.log_tail()}")
        if not ready:
            raise StackError(
                f"kube-apiserver was not ready in {timeout:.0f}s: {self.apiserver.log_tail()}"
            )
        self._write_kubeconfig()
        self.enabled_marker.write_text("")

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the API server, then etcd; True when either was running."""
        self.enabled_marker.unlink(missing_ok=True)
        stopped_apiserver = self.apiserver.stop(timeout)
        stopped_etcd = self.etcd.stop(timeout)
        return stopped_apiserver or stopped_etcd

    def health(self) -> list[tuple[str, process.Health]]:
        """etcd's and the API server's health, without changing anything."""
        etcd_url = f"http://{HOST}:{self.settings.kube_etcd_port_resolved}"

        def etcd() -> str | None:
            if not self._etcd_healthy():
                return None
            return f"etcd {self._etcd_json('/version').get('etcdserver', '?')}, {etcd_url}"

        def api() -> str | None:
            if not self._apiserver_ready():
                return None
            return f"Kubernetes {self._get_json('/version').get('gitVersion', '?')}, {self.server}"

        return [
            ("etcd", self.etcd.health(etcd, f"not answering on {etcd_url}")),
            ("kube-apiserver", self.apiserver.health(api, f"not ready at {self.server}")),
        ]

    # -- configuration --------------------------------------------------------------------
    def admin_token(self) -> str:
        """The admin's bearer token (group system:masters), from the static token file."""
        return self.token_file.read_text().split(",", 1)[0].strip()

    def _write_credentials(self) -> None:
        self.pki.mkdir(parents=True, exist_ok=True)
        if not self.token_file.is_file():
            # Static token auth: token,user,uid,"group" (kube-apiserver --token-auth-file).
            self.token_file.write_text(
                f'{secrets.token_hex(24)},{ADMIN_USER},{ADMIN_USER},"system:masters"\n'
            )
            self.token_file.chmod(0o600)
        key, public = self.pki / "sa.key", self.pki / "sa.pub"
        if not key.is_file():
            openssl = shutil.which("openssl") or "openssl"
            process.run([openssl, "genrsa", "-out", str(key), "2048"], what="openssl genrsa")
            process.run(
                [openssl, "rsa", "-in", str(key), "-pubout", "-out", str(public)],
                what="openssl rsa -pubout",
            )

    def _etcd_command(self) -> list[str]:
        client = f"http://{HOST}:{self.settings.kube_etcd_port_resolved}"
        peer = f"http://{HOST}:{self.settings.kube_etcd_port_resolved + 1}"
        return [
            str(self.binaries.etcd),
            "--name=minruntime",
            f"--data-dir={self.etcd_data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=minruntime={peer}",
            # A development stack: losing the last writes on a power cut is fine, and
            # fsync on a shared disk would make every API write wait.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]

    def _apiserver_command(self) -> list[str]:
        return [
            str(self.binaries.apiserver),
            f"--etcd-servers=http://{HOST}:{self.settings.kube_etcd_port_resolved}",
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={self.settings.kube_apiserver_port_resolved}",
            f"--cert-dir={self.pki}",
            f"--token-auth-file={self.token_file}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={self.pki / 'sa.pub'}",
            f"--service-account-signing-key-file={self.pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # No controller-manager creates each namespace's `default` ServiceAccount, so
            # with this plugin on, no pod could be created at all.
            "--disable-admission-plugins=ServiceAccount",
            # Without this it logs an error every 10 s: 127.0.0.1 is not a valid endpoint.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
        ]

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "minruntime",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.serving_cert),
                    },
                }
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self.admin_token()}}],
            "contexts": [
                {"name": "minruntime", "context": {"cluster": "minruntime", "user": ADMIN_USER}}
            ],
            "current-context": "minruntime",
        }
        # JSON is YAML: any kubeconfig reader takes it.
        self.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")
        self.kubeconfig.chmod(0o600)

    # -- probes ---------------------------------------------------------------------------
    def _etcd_healthy(self) -> bool:
        return self._etcd_json("/health").get("health") == "true"

    def _etcd_json(self, path: str) -> dict[str, object]:
        url = f"http://{HOST}:{self.settings.kube_etcd_port_resolved}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                return _object(reply.read())
        except OSError:
            return {}

    def _apiserver_ready(self) -> bool:
        if not process.port_in_use(HOST, self.settings.kube_apiserver_port_resolved):
            return False
        try:
            return self._get("/readyz") == b"ok"
        except (OSError, ValueError):
            return False

    def _get_json(self, path: str) -> dict[str, object]:
        try:
            return _object(self._get(path))
        except OSError:
            return {}

    def _get(self, path: str) -> bytes:
        if not self.serving_cert.is_file() or not self.token_file.is_file():
            raise OSError("no serving certificate or token yet")
        context = ssl.create_default_context(cafile=str(self.serving_cert))
        request = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self.admin_token()}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=3, context=context) as reply:
                return bytes(reply.read()).strip()
        except urllib.error.HTTPError as exc:
            raise OSError(f"{path}: HTTP {exc.code}") from exc


def _object(body: bytes) -> dict[str, object]:
    """A JSON object's fields; none when ``body`` is not a JSON object."""
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
