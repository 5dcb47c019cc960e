"""Which errors of the cluster side are an outage (waited for) and which are a bug (raised).

The watcher, the first listing, the Lease and the evictor retry only what `transient` says
passes by itself: the API server or Kafka away or slow, or an answer that says "later". Any
other error propagates: the loop stops and the process exits with its traceback (Kubernetes
restarts it), so a `KeyError` in the mirror is seen once, not retried for ever as an outage.
A 410 Gone is neither: the watcher relists where it reads the watch (`api.is_gone`).
"""

from __future__ import annotations

import http.client
from typing import Final

# The API server's "later": too many requests (priority and fairness, a budget) and its own
# failures or a proxy's in front of it (500, 502, 503, 504, ...).
HTTP_TOO_MANY_REQUESTS: Final = 429
HTTP_SERVER_ERROR: Final = 500


def transient(error: BaseException) -> bool:
    """True for an outage: a connection that fails or times out (``OSError``, urllib3's and
    http.client's errors), an API answer 429 or 5xx, an error that says it is `retriable`
    (aiokafka's, the watch stream's garbage), Kafka not answering in time. A stop
    (``InterruptedError``) is not an outage."""
    from aiokafka.errors import BrokerNotAvailableError, KafkaTimeoutError, KafkaUnavailableError
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(error, InterruptedError):
        return False
    if getattr(error, "retriable", None) is True:
        return True
    if isinstance(error, ApiException):
        status = error.status
        return isinstance(status, int) and (
            status == HTTP_TOO_MANY_REQUESTS or status >= HTTP_SERVER_ERROR
        )
    # Kafka's "not answered in time" that aiokafka does not mark `retriable`.
    kafka_away = (KafkaTimeoutError, KafkaUnavailableError, BrokerNotAvailableError)
    return isinstance(error, (OSError, http.client.HTTPException, HTTPError, *kafka_away))
