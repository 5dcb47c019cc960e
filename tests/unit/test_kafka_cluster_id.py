"""The local stack's KRaft cluster ID never starts with '-' (the storage tool reads it as an
option: "argument --cluster-id/-t: expected one argument", one format in 64 before)."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator

from minruntime.stack.kafka import new_cluster_id


def test_an_id_that_would_start_with_a_dash_is_drawn_again() -> None:
    # 0xF8.. encodes with a leading '-' (its first six bits are 62).
    dashed, plain = bytes([0xF8]) + bytes(15), uuid.UUID(int=12345).bytes
    assert base64.urlsafe_b64encode(dashed).decode().startswith("-")
    draws: Iterator[bytes] = iter([dashed, dashed, plain])
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == base64.urlsafe_b64encode(plain).decode().rstrip("=")
    assert next(draws, None) is None  # drawn three times


def test_random_ids_are_22_base64url_characters() -> None:
    ids = {new_cluster_id() for _ in range(2_000)}
    assert len(ids) == 2_000
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
    assert all(
        set(i) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        for i in ids
    )
