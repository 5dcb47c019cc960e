"""The event models' import: what each start of a service pays before its first event."""

from __future__ import annotations

import subprocess
import sys

from pydantic import BaseModel

from minruntime.events import EVENT_CLASSES
from minruntime.events.envelope import CloudEvent

# Counts ``inspect.getmodule`` calls while ``minruntime.events`` is imported in a fresh
# interpreter. pydantic looks for a model's field docstrings by walking the frames above the
# class statement, one ``getmodule`` each (a scan of ``sys.modules`` for a frame of the import
# machinery); a model made at run time has no class statement, so the walk reached the top of
# every import: 3,043 calls, a third of a second of each start. The models with a class
# statement find theirs at once: about 500.
_COUNT_GETMODULE = """
import inspect
calls = 0
getmodule = inspect.getmodule
def counted(*args, **kwargs):
    global calls
    calls += 1
    return getmodule(*args, **kwargs)
inspect.getmodule = counted
import minruntime.events
print(calls)
"""


def test_importing_the_event_models_walks_no_import_frames() -> None:
    found = subprocess.run(
        [sys.executable, "-c", _COUNT_GETMODULE], check=True, capture_output=True, text=True
    )
    assert int(found.stdout) < 1_000


def test_every_envelope_keeps_the_descriptions_of_its_fields() -> None:
    # The envelopes made at run time read no docstrings: their fields' descriptions are the
    # ones their bases give (the JSON Schemas check the rest, byte for byte).
    classes: list[type[BaseModel]] = [CloudEvent, *EVENT_CLASSES.values()]
    for event_class in classes:
        fields = event_class.model_fields
        assert fields["data"].description == "The event's payload; its shape depends on the type."
        assert fields["id"].description == "Unique per source: the de-duplication key."
