"""schemas/ is generated from the models, self-contained, and every example satisfies it."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from minruntime.events import EVENT_CLASSES, decode_dead_letter, decode_event
from minruntime.events.schemas import generate, stale_files
from tests.conftest import ROOT

SCHEMAS = ROOT / "schemas"
EXAMPLES = SCHEMAS / "examples"


def schema_of(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((SCHEMAS / f"{name}.json").read_text(encoding="utf-8"))
    return document


def example_documents() -> list[tuple[str, str, Any]]:
    """(label, schema name, document) for every example file and every JSONL line."""
    found: list[tuple[str, str, Any]] = []
    for path in sorted(EXAMPLES.glob("*.json")):
        found.append((path.name, path.stem, json.loads(path.read_text(encoding="utf-8"))))
    for path in sorted(EXAMPLES.glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            document = json.loads(line)
            found.append((f"{path.name}:{number}", document["type"], document))
    return found


EXAMPLE_DOCUMENTS = example_documents()
EXAMPLE_IDS = [label for label, _, _ in EXAMPLE_DOCUMENTS]


# A validator for the subset of JSON Schema 2020-12 the generator emits. jsonschema is not a
# dependency; when it is installed, test_examples_pass_jsonschema checks the same with it.
def violations(schema: dict[str, Any], value: Any, root: dict[str, Any], at: str = "") -> list[str]:
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return violations(target, value, root, at)
    found: list[str] = []
    if "anyOf" in schema and all(violations(s, value, root, at) for s in schema["anyOf"]):
        found.append(f"{at}: matches none of anyOf")
    if "not" in schema and not violations(schema["not"], value, root, at):
        found.append(f"{at}: matches 'not'")
    if "type" in schema and not _has_type(value, schema["type"]):
        return [*found, f"{at}: {value!r} is not of type {schema['type']}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{at}: {value!r} != const {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{at}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1e9):
            found.append(f"{at}: length of {value!r} out of range")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append(f"{at}: {value!r} does not match {schema['pattern']}")
    if _has_type(value, "number") and not (
        schema.get("minimum", float("-inf")) <= value <= schema.get("maximum", float("inf"))
    ):
        found.append(f"{at}: {value!r} out of range")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            found.append(f"{at}: fewer than {schema['minItems']} items")
        for index, item in enumerate(value):
            found += violations(schema.get("items", {}), item, root, f"{at}[{index}]")
    if isinstance(value, dict):
        found += [f"{at}.{key}: required" for key in schema.get("required", ()) if key not in value]
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                found += violations(properties[key], item, root, f"{at}.{key}")
            elif schema.get("additionalProperties") is False:
                found.append(f"{at}.{key}: not allowed")
            elif isinstance(schema.get("additionalProperties"), dict):
                found += violations(schema["additionalProperties"], item, root, f"{at}.{key}")
    return found


def _has_type(value: Any, expected: str) -> bool:
    checks = {
        "object": isinstance(value, dict),
        "array": isinstance(value, list),
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "null": value is None,
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "number": isinstance(value, int | float) and not isinstance(value, bool),
    }
    return checks[expected]


def test_committed_schemas_are_what_the_generator_writes() -> None:
    assert stale_files(SCHEMAS) == [], "run: .venv/bin/python scripts/generate_schemas.py"


def test_check_mode_lists_stale_files(tmp_path: Path) -> None:
    script = str(ROOT / "scripts" / "generate_schemas.py")
    for name, text in generate().items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "queue.upserted.json").write_text("{}", encoding="utf-8")
    (tmp_path / "queue.renamed.json").write_text("{}", encoding="utf-8")
    command = [sys.executable, "-m", "minruntime.events.schemas", "--out", str(tmp_path)]
    checked = subprocess.run([*command, "--check"], capture_output=True, text=True, check=False)
    assert checked.returncode == 1
    assert "queue.upserted.json" in checked.stderr
    assert "queue.renamed.json" in checked.stderr
    assert subprocess.run([sys.executable, script, "--check"], check=False).returncode == 0


def test_there_is_one_schema_per_type_and_one_example_each() -> None:
    expected = {f"{name}.json" for name in EVENT_CLASSES} | {"dead-letter.json"}
    assert set(generate()) == expected
    assert {path.name for path in EXAMPLES.glob("*.json")} == expected


@pytest.mark.parametrize("name", sorted(EVENT_CLASSES))
def test_schemas_are_self_contained_and_described(name: str) -> None:
    schema = schema_of(name)
    text = json.dumps(schema)
    refs = re.findall(r'"\$ref": "([^"]+)"', text)
    assert all(ref.startswith("#/$defs/") for ref in refs)
    assert schema["properties"]["type"]["const"] == name
    assert schema["required"] == ["specversion", "id", "source", "type", "time", "subject", "data"]
    for model in schema["$defs"].values():
        assert model["description"]
        for field_name, field in model["properties"].items():
            assert field.get("description"), f"{name}: {field_name} has no description"


@pytest.mark.parametrize(("label", "name", "document"), EXAMPLE_DOCUMENTS, ids=EXAMPLE_IDS)
def test_every_example_satisfies_its_schema(label: str, name: str, document: Any) -> None:
    schema = schema_of(name)
    assert violations(schema, document, schema) == []
    # Structural check on its own, so a bug in the small validator cannot hide a gap.
    assert set(schema["required"]) <= set(document)


@pytest.mark.parametrize(("label", "name", "document"), EXAMPLE_DOCUMENTS, ids=EXAMPLE_IDS)
def test_every_example_is_accepted_by_the_decoder(label: str, name: str, document: Any) -> None:
    value = json.dumps(document).encode()
    if name == "dead-letter":
        assert decode_dead_letter(value).error_kind == document["errorKind"]
    else:
        assert decode_event(value).type == name


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d["data"].pop("pods"), ".data.pods: required"),
        (lambda d: d["data"].update(priority="high"), ".data.priority: 'high' is not of type"),
        (lambda d: d["data"].update(extra=1), ".data.extra: not allowed"),
        (lambda d: d.update(type="podgroup.allocated"), ".type: 'podgroup.allocated' != const"),
        (lambda d: d.update(specversion="0.3"), ".specversion: '0.3' != const"),
        (lambda d: d.update(time="2026-11-21T10:00:00"), ".time: '2026-11-21T10:00:00' does"),
        (lambda d: d["data"]["pods"][0].update(gpu=-1), ".data.pods[0].gpu: -1 out of range"),
    ],
)
def test_the_schema_rejects_what_the_decoder_rejects(change: Any, problem: str) -> None:
    document = json.loads((EXAMPLES / "podgroup.submitted.json").read_text(encoding="utf-8"))
    change(document)
    schema = schema_of("podgroup.submitted")
    assert any(found.startswith(problem) for found in violations(schema, document, schema))
    with pytest.raises(ValueError, match=r"."):
        decode_event(json.dumps(document).encode())


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("0", True),
        ("300ms", True),
        ("1.5s", True),
        ("10m5s", True),
        ("2h45m15s", True),
        ("2d4h30m", True),
        ("5w4d12h", True),
        ("1µs", True),
        ("", False),
        ("5", False),
        ("1h2", False),
        ("1h-30m", False),
        ("-5m", False),
        ("10x", False),
        ("abc", False),
    ],
)
def test_the_duration_pattern_agrees_with_the_decoder(text: str, valid: bool) -> None:
    schema = schema_of("queue.upserted")
    field = schema["$defs"]["QueueUpsertedData"]["properties"]["reclaimMinRuntime"]
    document = {"name": "q", "reclaimMinRuntime": text}
    assert (violations(field, text, schema) == []) is valid
    event = {**json.loads((EXAMPLES / "queue.upserted.json").read_text()), "subject": "q"}
    value = json.dumps({**event, "data": document}).encode()
    if valid:
        decode_event(value)
    else:
        with pytest.raises(ValueError, match="duration"):
            decode_event(value)


def test_examples_pass_jsonschema_when_it_is_installed() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    for _, name, document in EXAMPLE_DOCUMENTS:
        schema = schema_of(name)
        jsonschema.Draft202012Validator.check_schema(schema)
        jsonschema.Draft202012Validator(schema).validate(document)


def test_events_import_only_the_standard_library_pydantic_and_the_core() -> None:
    package = importlib.import_module("minruntime.events")
    assert package.__file__ is not None
    allowed_roots = {"pydantic", "pydantic_core", "minruntime"}
    for path in Path(package.__file__).parent.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        for module in re.findall(r"^\s*(?:from|import) ([\w.]+)", source, re.MULTILINE):
            root = module.split(".")[0]
            if root == "minruntime":
                assert module.startswith(("minruntime.core", "minruntime.events")), module
            else:
                assert root in allowed_roots or root in sys.stdlib_module_names, (path, module)
