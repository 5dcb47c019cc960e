"""The bridge's producer's partitioner: aiokafka's default one, with less work per record.

aiokafka's ``DefaultPartitioner`` hashes every record's key with a pure-Python murmur2 (the
Java client's hash, so that keys land where the Java client would put them), also for a
topic of one partition, where the answer is always that partition. A first listing sends a
record to the ledger (one partition) for every event, and each gang's events share their
key (its PodGroup's uid): murmur2 was 8 % of the bridge's CPU in a 20,000-pod cold start.

``KeyPartitioner`` answers as ``DefaultPartitioner`` does, for every key and every list of
partitions (tests/unit/test_cluster_partitioner.py proves it), but skips the hash for a
single partition and remembers the hashes of the last keys it saw (at most
``REMEMBERED_KEYS``, forgotten all at once when full: a gang's events come together).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from aiokafka.partitioner import DefaultPartitioner, murmur2

REMEMBERED_KEYS: Final = 4_096


class KeyPartitioner:
    """``partitioner(key, all_partitions, available)``, as aiokafka calls it."""

    __slots__ = ("_hashes",)

    def __init__(self) -> None:
        self._hashes: dict[bytes, int] = {}

    def __call__(
        self, key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]
    ) -> int:
        if key is None:  # a random one, as the default's (the bridge's records all have keys)
            return int(DefaultPartitioner()(key, list(all_partitions), list(available)))
        if len(all_partitions) == 1:
            return all_partitions[0]
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= REMEMBERED_KEYS:
                self._hashes.clear()
            hashed = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return all_partitions[hashed % len(all_partitions)]
