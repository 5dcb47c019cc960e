"""The bridge's drift check: every ``MINRUNTIME_KUBE_DRIFT_SECONDS``, while its replica holds
the Lease, the comparison `minruntime kube diff` makes (``cluster.listing``, ``cluster.drift``),
exported as ``minruntime_kube_drift_*`` on the bridge's metrics port (``DriftGauges``).

The service's side is read through ``read_service`` (podgroup uids in, rows out), which the
command gives (`commands.kube`: the read surface, as `kube diff` reads it); the cluster package
itself never touches the database. A check that fails (the API server or the database away) is
one status line per outage and exports nothing new: the checked timestamp ages until
MinruntimeKubeDriftNotChecked fires. docs/kubernetes.md, "Drift, exported by the bridge".
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from minruntime.cluster.drift import Drift, ServicePodGroup, cluster_podgroups, compare
from minruntime.cluster.drift_metrics import DriftGauges
from minruntime.cluster.lease import LeaseKeeper
from minruntime.cluster.listing import list_cluster
from minruntime.cluster.mirror import Kind
from minruntime.retry import Outage
from minruntime.settings import Settings

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

ServiceReader = Callable[[Sequence[str]], list[ServicePodGroup]]

# Set on the thread of a check while it lists: what the mapping warns about an object (an
# annotation over the contract's bounds) was said when the bridge saw the object change, not
# again every period.
_checking = threading.local()


class _NotWhileChecking(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_checking, "on", False)


logging.getLogger("minruntime.cluster.mirror").addFilter(_NotWhileChecking())


@dataclass(eq=False)
class DriftWatch:
    """Compares the cluster with the service once per period of a term (see the module doc)."""

    settings: Settings
    client: ApiClient
    read_service: ServiceReader
    gauges: DriftGauges
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    def __post_init__(self) -> None:
        self.period = self.settings.kube_drift_seconds
        self._outage = Outage("the drift check", log)

    async def run(self, keeper: LeaseKeeper) -> None:
        """Check every period until the term ends; what a check found is exported only if the
        term still held when it finished."""
        try:
            while not await asyncio.to_thread(keeper.ended.wait, self.period):
                if not keeper.holds():
                    return
                try:
                    drift, at = await asyncio.to_thread(self.check)
                except Exception as error:  # the API server, the database: said once, retried
                    self._outage.failed(error)
                    continue
                self._outage.back()
                if keeper.holds():
                    self.gauges.record(drift, at)
                    _say(drift)
        finally:
            self.gauges.forget()

    def check(self) -> tuple[Drift, datetime]:
        """One comparison, as `kube diff` makes it: the cluster listed first, then the service."""
        at = self.clock()
        _checking.on = True
        try:
            listing = list_cluster(self.client, self.settings, [Kind.POD_GROUP, Kind.POD])
        finally:
            _checking.on = False
        cluster = cluster_podgroups(listing[Kind.POD_GROUP], listing[Kind.POD])
        return compare(cluster, self.read_service(list(cluster))), at


def _say(drift: Drift) -> None:
    count = len(drift.uids)
    if count:
        fields = ", ".join(f"{field} {n}" for field, n in drift.podgroups_by_field().items() if n)
        log.info("drift: %d of %d podgroups differ (%s)", count, drift.checked, fields)
    else:
        log.info("drift: none (%d podgroups compared)", drift.checked)
