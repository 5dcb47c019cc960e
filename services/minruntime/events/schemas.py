"""Generate the JSON Schema files of ``schemas/`` from the models (the models are the truth).

``python -m minruntime.events.schemas [--check] [--out DIR]`` (or ``scripts/generate_schemas.py``)
writes one self-contained file per event type (the full CloudEvent with that type's data and
``type`` as a const) and ``dead-letter.json``. ``--check`` writes nothing and exits 1 listing
every stale, missing or unexpected file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

from pydantic.json_schema import GenerateJsonSchema

from minruntime.core import format_duration, format_rfc3339
from minruntime.events.dead_letter import DeadLetterRecord
from minruntime.events.envelope import EVENT_CLASSES, EVENT_TYPES
from minruntime.events.topics import DEFAULT_TOPICS

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
ENVELOPE_ATTRIBUTES: Final = ("specversion", "id", "source", "type", "time", "subject", "data")
DEAD_LETTER_FILE: Final = "dead-letter.json"
# services/minruntime/events/schemas.py -> the checkout's top-level schemas/ folder.
DEFAULT_OUT: Final = Path(__file__).resolve().parents[3] / "schemas"


class WireJsonSchema(GenerateJsonSchema):
    """Defaults written as they appear on the wire; no generated per-field titles."""

    def encode_default(self, dft: Any) -> Any:
        """Durations as duration strings and times as RFC3339, like the serializers."""
        if isinstance(dft, timedelta):
            return format_duration(dft)
        if isinstance(dft, datetime):
            return format_rfc3339(dft)
        return super().encode_default(dft)

    def field_title_should_be_set(self, schema: Any) -> bool:
        """Never: "Nodepool" says less than the field name and its description."""
        del schema
        return False


def event_schema(event_type: str) -> dict[str, Any]:
    """The JSON Schema of one event type: the CloudEvent envelope with that type's data."""
    event_class = EVENT_CLASSES[event_type]
    generated = event_class.model_json_schema(
        by_alias=True, mode="validation", schema_generator=WireJsonSchema
    )
    data_model = generated["properties"]["data"]["$ref"].rsplit("/", 1)[-1]
    properties = generated["properties"]
    properties["type"] = {"const": event_type, "type": "string", "description": "The event type."}
    properties["specversion"] = {
        "const": "1.0",
        "type": "string",
        "description": "The CloudEvents version: always 1.0.",
    }
    properties["data"] = {"$ref": f"#/$defs/{data_model}"}
    topic = DEFAULT_TOPICS[EVENT_TYPES[event_type].role]
    return {
        "$schema": DIALECT,
        "$id": f"{event_type}.json",
        "title": f"{event_type} (CloudEvents 1.0, structured JSON mode)",
        "description": (
            f"{generated['$defs'][data_model].get('description', '')} "
            f"Topic {topic} (default name); the Kafka record key is the subject. "
            "Extension attributes are allowed and ignored."
        ),
        "type": "object",
        "properties": properties,
        "required": list(ENVELOPE_ATTRIBUTES),
        "$defs": generated["$defs"],
    }


def dead_letter_schema() -> dict[str, Any]:
    """The JSON Schema of a ``kai.dead-letter`` record."""
    generated = DeadLetterRecord.model_json_schema(
        by_alias=True, mode="serialization", schema_generator=WireJsonSchema
    )
    return {
        "$schema": DIALECT,
        "$id": DEAD_LETTER_FILE,
        **generated,
        # Every field is always written (null when unknown), so every field is required.
        "required": list(generated["properties"]),
    }


def generate() -> dict[str, str]:
    """File name -> text of every schema file."""
    schemas = {f"{name}.json": event_schema(name) for name in EVENT_CLASSES}
    schemas[DEAD_LETTER_FILE] = dead_letter_schema()
    return {
        name: json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
        for name, schema in schemas.items()
    }


def stale_files(out: Path) -> list[str]:
    """Files in ``out`` that differ from what generate() produces, are missing or unexpected."""
    expected = generate()
    stale = [
        name
        for name, text in expected.items()
        if not (out / name).is_file() or (out / name).read_text(encoding="utf-8") != text
    ]
    unexpected = [path.name for path in out.glob("*.json") if path.name not in expected]
    return sorted(stale + unexpected)


def write(out: Path) -> list[str]:
    """Write every schema file into ``out``; return the names of the files that changed."""
    out.mkdir(parents=True, exist_ok=True)
    changed = stale_files(out)
    for name, text in generate().items():
        if name in changed:
            (out / name).write_text(text, encoding="utf-8")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only report stale files")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the schemas/ folder")
    arguments = parser.parse_args(argv)
    out: Path = arguments.out
    if arguments.check:
        stale = stale_files(out)
        for name in stale:
            print(f"stale: {out / name}", file=sys.stderr)
        if stale:
            print("run: python scripts/generate_schemas.py", file=sys.stderr)
        return 1 if stale else 0
    for name in write(out):
        print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
