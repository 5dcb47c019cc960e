"""The processor's consumer with a sink that stores nothing: what reading Kafka costs per record.

Run by ``bench_ingest.py --consumer-only`` as a subprocess with the private pipeline's
environment (``MINRUNTIME_*``) and ``BENCH_EXPECTED`` (records to wait for),
``BENCH_RESULT`` (a file for the result). The app is ``stream.app.build_app`` as the processor
builds it (the faust host, the batched consumer with its lanes, batching settings and Kafka
offset commits, and the worker thread per batch), but its sink only counts the records; no
topic guard, no relay. Once every record was handed to the sink it writes
``{"seconds": ..., "cpu": ..., "batches": ...}`` (wall and process CPU from the first batch
to the last) and exits.

Until issue 10's batched consumer this measured faust's agents (``take_events``) the same way
(``faust_only.py``): docs/benchmarks.md keeps both figures.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import faust

from minruntime.bootstrap import tune_gc
from minruntime.core.topic_life import TopicLife
from minruntime.ingest import BatchOutcome, InboundRecord
from minruntime.settings import Settings
from minruntime.stream.app import build_app


def main() -> None:
    expected = int(os.environ["BENCH_EXPECTED"])
    result = Path(os.environ["BENCH_RESULT"])
    seen = {"records": 0, "batches": 0}
    first: dict[str, float] = {}

    def sink(
        records: Sequence[InboundRecord], topic_lives: Mapping[str, TopicLife] | None = None
    ) -> BatchOutcome:
        if not first:
            first.update(wall=time.perf_counter(), cpu=time.process_time())
        seen["records"] += len(records)
        seen["batches"] += 1
        if seen["records"] >= expected:
            summary: dict[str, Any] = {
                "seconds": time.perf_counter() - first["wall"],
                "cpu": time.process_time() - first["cpu"],
                "batches": seen["batches"],
            }
            result.write_text(json.dumps(summary))
            os._exit(0)
        return BatchOutcome(applied=len(records))

    processor = build_app(Settings(), sink)  # type: ignore[arg-type]
    worker = faust.Worker(processor.app, loglevel="warning", quiet=True)
    tune_gc()  # as the processor does
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
