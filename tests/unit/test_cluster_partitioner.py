"""The bridge's partitioner puts every record where aiokafka's default one would."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.cluster import partitioner
from minruntime.cluster.partitioner import KeyPartitioner

DEFAULT = DefaultPartitioner()


@settings(max_examples=300)
@given(
    keys=st.lists(st.binary(max_size=80), min_size=1, max_size=40),
    counts=st.lists(st.integers(1, 64), min_size=1, max_size=6),
)
def test_every_key_goes_where_the_default_partitioner_puts_it(
    keys: list[bytes], counts: list[int]
) -> None:
    mine = KeyPartitioner()
    for count in counts:
        partitions = list(range(count))
        for key in keys + keys:  # again: from what it remembers
            assert mine(key, partitions, partitions) == DEFAULT(key, partitions, partitions)


def test_the_same_once_it_has_forgotten() -> None:
    mine = KeyPartitioner()
    partitions = list(range(12))
    keys = [f"pod/{i:036d}".encode() for i in range(partitioner.REMEMBERED_KEYS * 2 + 5)]
    for key in keys + keys:
        assert mine(key, partitions, partitions) == DEFAULT(key, partitions, partitions)
    assert len(mine._hashes) <= partitioner.REMEMBERED_KEYS


def test_a_record_without_a_key_goes_to_one_of_the_available_partitions() -> None:
    assert KeyPartitioner()(None, [0, 1, 2], [2]) == 2
