"""Benchmark decoding alone (``events.decode_event``): no Kafka, no database.

Generates ``bench_ingest``'s deterministic trace (``--trace issue``: 1,000 queues, 500 nodes,
20,000 podgroups submitted -> allocated -> released), then times ``decode_event(value, topic)``
over every event of each type, as ``apply_batch`` calls it (best of ``--repeat`` passes), and
prints µs/event (CPU time) per type and for the whole trace. Run it with another checkout's
interpreter (``/work/other/.venv/bin/python benchmarks/bench_decode.py``) to compare decoders.

``--parts`` also splits each type's cost into what ``decode_event`` does, each part timed
alone on the same values: the JSON parse (``pydantic_core.from_json``, a proxy for the parse
inside validation), ``validate_json`` of the discriminated union (parse, envelope and data
validation, model construction, with the Python validators inside it), the Python validators
re-run on the decoded values (the envelope's time through the core's RFC3339 parser, the
subject check, the data model's ``after`` validators), the byte scans of the bounds (depth,
NaN/Infinity, escaped NUL: ``decode_event`` minus ``validate_json``), and the ``\\u`` pre-check
``ingest.batch`` runs after decoding.

Each type is also timed in binary content mode (the CloudEvents Kafka binding: attributes in
``ce_`` headers, the data as the value, as ``minruntime produce --mode binary`` and the SDK's
``to_binary`` write it): ``decode_event(data, topic, headers=headers)``, which builds the
equivalent structured event and decodes that; the column says how much more it costs than
the structured record (skipped on a checkout without binary mode).

``--retain N`` then decodes the whole trace again in batches of N whose events are kept until
the batch ends, as ``apply_batch`` keeps them (2,000 in the processor, 20,000 in a replay),
once with CPython's default garbage-collector thresholds and once with the processor's
(``bootstrap.tune_gc``): the young objects of a batch are what a default collector re-scans.

    .venv/bin/python benchmarks/bench_decode.py [--trace issue|default] [--repeat 5] [--parts]
        [--retain 2000]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic_core import from_json

from bench_ingest import SHAPES, TRACES, generate
from minruntime import events
from minruntime.bootstrap import tune_gc
from minruntime.events import DEFAULT_TOPICS, Event, codec, decode_event
from minruntime.events.envelope import CloudEvent
from minruntime.events.types import _validate_timestamp

# The union's validate_json as decode_event calls it (an older checkout: via the TypeAdapter).
_VALIDATE_JSON = getattr(codec, "_VALIDATE_JSON", None) or codec._ANY_EVENT.validate_json


def values_by_type(trace: str) -> dict[str, list[tuple[bytes, str]]]:
    """Event type -> [(value, topic)] of the trace, in production order."""
    queues, nodes, podgroups = TRACES[trace]
    steps, every = SHAPES[trace]
    generated = generate(queues, nodes, podgroups, allocation_steps=steps, annotate_every=every)
    by_type: dict[str, list[tuple[bytes, str]]] = {}
    for role, _, value in generated.events:
        by_type.setdefault(json.loads(value)["type"], []).append((value, DEFAULT_TOPICS[role]))
    return by_type


def binary_records(records: list[tuple[bytes, str]]) -> list[tuple[bytes, str, Any]] | None:
    """The same events as binary-mode records: (data, topic, headers), or None (no binding)."""
    binary_headers = getattr(events, "binary_headers", None)
    if binary_headers is None:
        return None
    out = []
    for value, topic in records:
        headers, data = binary_headers(json.loads(value))
        out.append((json.dumps(data, separators=(",", ":")).encode(), topic, tuple(headers)))
    return out


def decode_binary(record: tuple[bytes, str, Any]) -> object:
    value, topic, headers = record
    return decode_event(value, topic, headers=headers)


def best(function: Callable[[Any], object], items: Sequence[Any], repeat: int) -> float:
    """CPU seconds per item of the fastest of ``repeat`` passes of ``function`` over ``items``.

    CPU time of this process, not wall time: on a shared machine the other processes'
    load then slows a pass (caches, frequency) but does not add their time slices to it.
    """
    fastest = float("inf")
    for _ in range(repeat):
        began = time.process_time()
        for item in items:
            function(item)
        fastest = min(fastest, time.process_time() - began)
    return fastest / len(items)


def python_validators(event: Event) -> Callable[[Event], object]:
    """A call re-running the Python validators that decoding ran on ``event``."""
    after = [
        decorator.func
        for decorator in type(event.data).__pydantic_decorators__.model_validators.values()
        if decorator.info.mode == "after"
    ]
    text = event.time.isoformat()

    def run(decoded: Event) -> object:
        _validate_timestamp(text)
        CloudEvent._subject_is_the_identity(decoded)
        for validator in after:
            validator(decoded.data)
        return decoded

    return run


def parts(records: list[tuple[bytes, str]], repeat: int) -> dict[str, float]:
    """µs/event of each part of decoding ``records`` (see the module docstring)."""
    values = [value for value, _ in records]
    events = [decode_event(value, topic) for value, topic in records]
    validators = python_validators(events[0])
    whole = best(lambda record: decode_event(*record), records, repeat)
    union = best(lambda value: _VALIDATE_JSON(value, by_alias=True, by_name=False), values, repeat)
    return {
        "decode_event": whole,
        "JSON parse (from_json)": best(from_json, values, repeat),
        "validate_json (union)": union,
        "Python validators": best(validators, events, repeat),
        "bounds scans": whole - union,
        "ingest's \\u check": best(lambda value: b"\\u" in value, values, repeat),
    }


def retained(records: list[tuple[bytes, str]], batch: int, repeat: int) -> float:
    """CPU seconds per event decoding ``records`` in batches whose events live to its end."""

    def run(start: int) -> object:
        return [decode_event(value, topic) for value, topic in records[start : start + batch]]

    starts = range(0, len(records), batch)
    return best(run, starts, repeat) * len(starts) / len(records)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", choices=sorted(TRACES), default="issue")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--parts", action="store_true", help="split each type's cost in parts")
    parser.add_argument("--retain", type=int, metavar="N", help="also decode in kept batches of N")
    args = parser.parse_args()
    by_type = values_by_type(args.trace)
    total = sum(len(records) for records in by_type.values())
    print(
        f"{total:,} events ({args.trace} trace); Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.2f}; best of {args.repeat}"
    )
    seconds = binary_seconds = 0.0
    for event_type, records in sorted(by_type.items(), key=lambda item: -len(item[1])):
        per_event = best(lambda record: decode_event(*record), records, args.repeat)
        seconds += per_event * len(records)
        size = sum(len(value) for value, _ in records) / len(records)
        line = f"{event_type:20s} {len(records):7,} events {size:5.0f} B  {per_event * 1e6:6.2f} µs"
        as_binary = binary_records(records)
        if as_binary is not None:
            per_binary = best(decode_binary, as_binary, args.repeat)
            binary_seconds += per_binary * len(records)
            header_bytes = sum(len(value) for *_, headers in as_binary for _, value in headers)
            line += (
                f"   binary {per_binary * 1e6:6.2f} µs ({(per_binary / per_event - 1) * 100:+4.0f}"
                f" %, {header_bytes / len(records):3.0f} B of headers)"
            )
        print(line)
        if args.parts:
            for part, cost in parts(records, args.repeat).items():
                print(f"    {part:28s} {cost * 1e6:6.2f} µs")
    print(
        f"all {total:,} events: {seconds:.3f} s = {seconds / total * 1e6:.2f} µs/event "
        f"({total / seconds:,.0f} events/s); load {os.getloadavg()[0]:.2f}"
    )
    if binary_seconds:
        print(
            f"binary mode: {binary_seconds:.3f} s = {binary_seconds / total * 1e6:.2f} µs/event "
            f"({total / binary_seconds:,.0f} events/s, {(binary_seconds / seconds - 1) * 100:+.0f} "
            "% against structured)"
        )
    if args.retain:
        records = [record for records in by_type.values() for record in records]
        default = retained(records, args.retain, args.repeat)
        tune_gc()
        tuned = retained(records, args.retain, args.repeat)
        print(
            f"kept in batches of {args.retain:,}: {default * 1e6:.2f} µs/event with the default "
            f"collector, {tuned * 1e6:.2f} with the processor's (thresholds {gc.get_threshold()})"
        )


if __name__ == "__main__":
    main()
