"""One small HTTP server per process: `/metrics`, `/healthz` and `/readyz` on the metrics port.

prometheus_client's own `start_http_server` serves metrics only; probes of a supervisor or
Kubernetes need the other two beside them, on the same port. The server runs in a daemon
thread, so it answers even while the process's event loop is busy — which is exactly what
`/healthz` measures (it asks the loop, with a timeout).

- `/healthz`: 200 `alive`, or 503 with the reason.
- `/readyz`: 200 `ready`, or 503 with one `name: reason` line per failing check; JSON
  (`{"ready": false, "failing": {"name": "reason"}}`) when the request accepts
  `application/json` or asks `?format=json`.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from minruntime.errors import UserError
from minruntime.health.checks import LIVENESS, READINESS, Check, Readiness
from minruntime.health.metrics import ReadinessMetrics

TEXT = "text/plain; charset=utf-8"


class HealthServer:
    """`/metrics`, `/healthz` and `/readyz` on host:port, in a daemon thread."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        registry: CollectorRegistry,
        readiness: Readiness,
        liveness: Check,
    ) -> None:
        handler = type(
            "Handler",
            (_Handler,),
            {"registry": registry, "readiness": readiness, "liveness": staticmethod(liveness)},
        )
        # Binding here (not in the thread) makes a taken port an error the caller sees.
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-server", daemon=True
        )

    @property
    def port(self) -> int:
        """The port it listens on (useful when asked for port 0)."""
        return int(self._server.server_address[1])

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop answering and free the port."""
        self._server.shutdown()
        self._server.server_close()


class MetricsPortError(UserError):
    """The Prometheus endpoint could not listen."""


def serve_metrics(
    host: str, port: int, variable: str, component: str, registry: CollectorRegistry = REGISTRY
) -> HealthServer | None:
    """Serve /metrics, /healthz and /readyz of this process on http://host:port (port 0: not
    at all); the metrics include its readiness (``minruntime_ready{component}``)."""
    if not port:
        return None
    try:
        server = HealthServer(host, port, registry=registry, readiness=READINESS, liveness=LIVENESS)
    except OSError as error:
        raise MetricsPortError(
            f"cannot serve metrics on {host}:{port} ({error.strerror or error}); "
            f"set MINRUNTIME_{variable} to a free port, or 0 to turn metrics off"
        ) from None
    ReadinessMetrics(READINESS, component).register(registry)
    return server.start()


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry
    readiness: Readiness
    liveness: Check

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/metrics":
            self._answer(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        elif url.path == "/healthz":
            reason = self.liveness()
            self._text(200 if reason is None else 503, "alive" if reason is None else reason)
        elif url.path == "/readyz":
            self._readiness(want_json=self._wants_json(url.query))
        else:
            self._text(404, "not found: try /metrics, /healthz or /readyz")

    def _readiness(self, *, want_json: bool) -> None:
        failing = self.readiness.failures()
        status = 503 if failing else 200
        if want_json:
            body = json.dumps({"ready": not failing, "failing": failing}, sort_keys=True)
            self._answer(status, body.encode(), "application/json")
        elif failing:
            self._text(status, "\n".join(f"{name}: {why}" for name, why in failing.items()))
        else:
            self._text(status, "ready")

    def _wants_json(self, query: str) -> bool:
        if parse_qs(query).get("format") == ["json"]:
            return True
        return "application/json" in self.headers.get("Accept", "")

    def _text(self, status: int, text: str) -> None:
        self._answer(status, f"{text}\n".encode(), TEXT)

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # Probes every few seconds would flood the log; the answers say everything.
        return
