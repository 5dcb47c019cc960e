"""Kubernetes-native input: Queue objects and KAI's scheduler config, as contract events.

`minruntime queues apply -f` and `minruntime config apply -f` read what a KAI operator already
has: `scheduling.run.ai/v2` Queue manifests, and the scheduler config (the `tiers:` YAML, bare
or inside the ConfigMap that ships it under `data.config.yaml`). This module turns them into
`queue.upserted` and `config.updated` data. Only `read_manifests` touches files; the
translation is pure. Every error is one line naming the file, the document (and the object,
when it has a name) and the field.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, Literal

import yaml
from pydantic import ValidationError

from minruntime.core import (
    DEFAULT_NODE_POOL,
    InvalidConfigError,
    MinRuntimeConfig,
    MinRuntimeError,
    QueueCycleError,
    QueueTree,
    parse_duration,
)
from minruntime.core.disruption import QUEUE_DISRUPTION_ANNOTATIONS, check_queue_annotation
from minruntime.errors import UserError
from minruntime.events import ConfigUpdatedData, EventType, QueueUpsertedData
from minruntime.events.inputs import MAX_QUEUE_ANNOTATION_VALUE
from minruntime.events.types import MAX_LABEL

QUEUE_API_VERSION: Final = "scheduling.run.ai/v2"
QUEUE_KIND: Final = "Queue"
# Every field of KAI's QueueSpec (pkg/apis/scheduling/v2/queue_types.go). The ones without a
# minimum-runtime meaning are accepted and ignored. Anything else is a typo (kubectl's strict
# field validation refuses it too) that must not silently leave a queue unprotected.
QUEUE_SPEC_FIELDS: Final = frozenset(
    {
        "displayName",
        "parentQueue",
        "priority",
        "resources",
        "preemptMinRuntime",
        "reclaimMinRuntime",
    }
)
QUEUE_DURATION_FIELDS: Final = ("preemptMinRuntime", "reclaimMinRuntime")
# KAI's spec.resources (pkg/apis/scheduling/v2/resources.go): resources and their settings.
QUEUE_RESOURCES: Final = ("gpu", "cpu", "memory")
QUEUE_RESOURCE_SETTINGS: Final = ("quota", "limit", "overQuotaWeight")
# KAI's default `--nodepool-label-key` (pkg/common/constants/constants.go): the label naming
# the node pool (scheduler shard) of a Node, a PodGroup and a Queue.
NODE_POOL_LABEL: Final = "kai.scheduler/node-pool"
CONFIG_MAP_KEY: Final = "config.yaml"
PLUGIN_NAME: Final = "minruntime"
MANIFEST_SUFFIXES: Final = (".yaml", ".yml", ".json")
STDIN: Final = "-"

_ACCEPTED_QUEUES: Final = (
    f"`minruntime queues apply` accepts {QUEUE_API_VERSION} {QUEUE_KIND} objects "
    "(or a v1 List of them)"
)
_ACCEPTED_CONFIG: Final = (
    "`minruntime config apply` accepts KAI's scheduler config (the tiers: YAML) "
    f'or the v1 ConfigMap that holds it under data["{CONFIG_MAP_KEY}"]'
)
_CONFIG_MAP_FIELD: Final = f'data["{CONFIG_MAP_KEY}"]'


class ManifestError(UserError):
    """A manifest cannot be read or translated; the message names file, document and field."""


@dataclass(frozen=True)
class Manifest:
    """One YAML document (a Kubernetes object or a bare scheduler config) and where it was."""

    file: str
    document: int
    """1-based, counting every YAML document of the file (empty ones too)."""
    body: Any
    item: int | None = None
    """1-based position inside a `kind: List` document; None for a plain document."""

    @property
    def kind(self) -> str | None:
        kind = self.body.get("kind") if isinstance(self.body, Mapping) else None
        return kind if isinstance(kind, str) and kind else None

    @property
    def name(self) -> str | None:
        metadata = self.body.get("metadata") if isinstance(self.body, Mapping) else None
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        return name if isinstance(name, str) and name else None

    @property
    def where(self) -> str:
        """E.g. `queues.yaml document 2 (Queue "research")`."""
        place = f"{self.file} document {self.document}"
        if self.item is not None:
            place += f" item {self.item}"
        if self.name is not None:
            place += f' ({self.kind or "object"} "{self.name}")'
        return place

    def error(self, field: str, problem: str) -> ManifestError:
        """The one-line error about `field` (a dotted path; "" = the whole document)."""
        return ManifestError(
            f"{self.where}: {field}: {problem}" if field else f"{self.where}: {problem}"
        )


# -- reading ---------------------------------------------------------------------------------


def read_manifests(
    paths: Sequence[str], read_stdin: Callable[[], str] | None = None
) -> list[Manifest]:
    """Every non-empty document of the files; a directory: its .yaml/.yml/.json; - = stdin."""
    files = [file for path in paths for file in _manifest_files(path)]
    manifests = [
        manifest
        for file in files
        for manifest in parse_manifests(_shown_path(file), _read(file, read_stdin))
    ]
    if not manifests:
        shown = ", ".join(_shown_path(file) for file in files)
        raise ManifestError(f"nothing to apply: no YAML documents in {shown}")
    return manifests


def parse_manifests(file: str, text: str) -> list[Manifest]:
    """Every non-empty YAML document of one file's text; a v1 List is expanded into its items."""
    manifests: list[Manifest] = []
    index = 0  # the documents read so far
    try:
        for index, body in enumerate(yaml.safe_load_all(text), 1):
            if body is not None:
                manifests.extend(_expand_list(Manifest(file, index, body)))
    except yaml.YAMLError as exc:
        problem = _yaml_problem(exc)
        raise ManifestError(f"{file} document {index + 1}: not valid YAML: {problem}") from exc
    return manifests


def _manifest_files(path: str) -> list[str]:
    if path == STDIN or not Path(path).is_dir():
        return [path]  # a missing file is reported when it is read
    files = sorted(
        str(child)
        for child in Path(path).iterdir()
        if child.suffix.lower() in MANIFEST_SUFFIXES
        and child.is_file()
        and not child.name.startswith(".")
    )
    if not files:
        raise ManifestError(f"{path}: no {', '.join(MANIFEST_SUFFIXES)} files in this directory")
    return files


def _read(file: str, read_stdin: Callable[[], str] | None) -> str:
    try:
        if file == STDIN:
            return (read_stdin or sys.stdin.read)()
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{_shown_path(file)}: cannot read: {exc}") from exc


def _shown_path(file: str) -> str:
    return "<stdin>" if file == STDIN else file


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        said = "; ".join(part for part in (exc.context, exc.problem) if part)
        mark = exc.problem_mark or exc.context_mark
        if mark is not None:
            said += f" at line {mark.line + 1}, column {mark.column + 1}"
        return " ".join(said.split())
    return " ".join(str(exc).split())


def _expand_list(manifest: Manifest) -> Iterator[Manifest]:
    # `kubectl get queues -o yaml` writes a v1 List: apply its items as if written one by one.
    body = manifest.body
    if not (
        isinstance(body, Mapping) and body.get("apiVersion") == "v1" and body.get("kind") == "List"
    ):
        yield manifest
        return
    items = body.get("items") or []
    if not isinstance(items, list):
        raise manifest.error("items", f"must be a list of objects, got {_described(items)}")
    for number, item in enumerate(items, 1):
        yield Manifest(manifest.file, manifest.document, item, item=number)


# -- manifests -> events ------------------------------------------------------------------------

ChangeData = QueueUpsertedData | ConfigUpdatedData


def change_events(
    manifests: Sequence[Manifest],
    node_pool: str = DEFAULT_NODE_POOL,
    only: Literal["Queue", "config"] | None = None,
    node_pool_label: str = NODE_POOL_LABEL,
) -> list[tuple[Manifest, EventType, ChangeData]]:
    """The events Queue objects and a scheduler config stand for, in order: the one translation
    of `queues apply`, `config apply` and `whatif -f`.

    The queues are checked as a set (a queue twice, parent cycles) and there is one config at
    most. `only` reads every manifest as that kind, so a stray object is named as not one. A
    Queue with the ``node_pool_label`` label is in that node pool; one without is in every
    pool's tree (``node_pool`` is the config's pool, never a queue's).
    """
    queues = [m for m in manifests if only == "Queue" or (only is None and m.kind == "Queue")]
    configs = [m for m in manifests if only == "config" or (only is None and m.kind != "Queue")]
    upserts = iter(queue_upserts(queues, node_pool_label) if queues else [])
    config = config_update(configs, node_pool) if configs else None
    events: list[tuple[Manifest, EventType, ChangeData]] = []
    for manifest in manifests:
        if any(manifest is queue for queue in queues):
            events.append((manifest, EventType.QUEUE_UPSERTED, next(upserts)))
        elif config is not None:
            events.append((manifest, EventType.CONFIG_UPDATED, config))
    return events


# -- Queue objects -> queue.upserted -------------------------------------------------------------


def queue_upserts(
    manifests: Sequence[Manifest],
    node_pool_label: str = "",
    unlabelled: str | None = None,
    ignored: list[str] | None = None,
) -> list[QueueUpsertedData]:
    """One queue.upserted data per Queue object, in order; the first bad object raises.

    ``nodePool`` is the value of the ``node_pool_label`` label (KAI's shard rule), else
    ``unlabelled`` (None: the queue is in every pool's tree); no label key: None.
    The disruption annotations (``minruntime.kai.scheduler/max-evictions-per-window``,
    ``eviction-window``, ``min-eviction-gap``) are checked against their bounds: a bad one
    raises, unless ``ignored`` is given (the bridge): then it is left out and its one-line
    problem appended there.
    Also refused: a queue defined twice, and parentQueue cycles among the given queues (the
    stream would dead-letter them one by one; here nothing is sent).
    """
    upserts: list[QueueUpsertedData] = []
    defined: dict[str, Manifest] = {}
    for manifest in manifests:
        upsert = _queue_upsert(manifest, node_pool_label, unlabelled, ignored)
        first = defined.setdefault(upsert.name, manifest)
        if first is not manifest:
            raise manifest.error(
                "metadata.name", f"queue {upsert.name!r} is defined twice (also in {first.where})"
            )
        upserts.append(upsert)
    try:
        QueueTree(upsert.to_queue() for upsert in upserts)
    except QueueCycleError as exc:
        culprit = defined.get(exc.cycle[0], manifests[0])
        raise culprit.error("spec.parentQueue", str(exc)) from exc
    return upserts


def _queue_upsert(
    manifest: Manifest, node_pool_label: str, unlabelled: str | None, ignored: list[str] | None
) -> QueueUpsertedData:
    body = _object(manifest)
    _expect_queue(manifest, body)
    metadata = _mapping(manifest, body.get("metadata"), "metadata")
    name = _metadata_name(manifest, metadata)
    node_pool = _node_pool(manifest, metadata, node_pool_label, unlabelled)
    spec = _mapping(manifest, body.get("spec"), "spec")
    unknown = sorted(str(field) for field in spec if field not in QUEUE_SPEC_FIELDS)
    if unknown:
        raise manifest.error(
            f"spec.{unknown[0]}",
            f"unknown field (a {QUEUE_API_VERSION} Queue spec has "
            f"{', '.join(sorted(QUEUE_SPEC_FIELDS))})",
        )
    parent = spec.get("parentQueue")
    if parent is not None and not isinstance(parent, str):
        raise manifest.error("spec.parentQueue", f"must be a queue name, got {_described(parent)}")
    data = {
        "name": name,
        "parentQueue": parent or None,
        **{field: _queue_duration(manifest, spec, field) for field in QUEUE_DURATION_FIELDS},
        **_queue_shares(manifest, spec),
        "nodePool": node_pool,
        "annotations": _queue_disruption(manifest, metadata, ignored),
    }
    try:
        return QueueUpsertedData.model_validate(data)
    except ValidationError as exc:  # not reached with the checks above; kept as a guard
        raise manifest.error("", _first_problem(exc)) from exc


def _queue_disruption(
    manifest: Manifest, metadata: Mapping[Any, Any], ignored: list[str] | None
) -> dict[str, str] | None:
    """The Queue's valid disruption annotations (None: none); a bad one raises, or with
    ``ignored`` is left out and named there."""
    annotations = _mapping(manifest, metadata.get("annotations"), "metadata.annotations")
    kept: dict[str, str] = {}
    for key in QUEUE_DISRUPTION_ANNOTATIONS:
        value = annotations.get(key)
        if value is None:
            continue
        field = f"metadata.annotations[{key!r}]"
        try:
            if not isinstance(value, str):
                raise InvalidConfigError(f"must be a string (quote it), got {_described(value)}")
            if len(value) > MAX_QUEUE_ANNOTATION_VALUE:
                raise InvalidConfigError(f"longer than {MAX_QUEUE_ANNOTATION_VALUE} characters")
            check_queue_annotation(key, value)
        except InvalidConfigError as exc:
            # The field names the annotation already.
            problem = str(exc).removeprefix(f"{key}: ").removeprefix(f"{key} ")
            if ignored is None:
                raise manifest.error(field, problem) from exc
            ignored.append(f"{manifest.where}: {field}: {problem}; ignored")
            continue
        kept[key] = value
    return kept or None


def _queue_shares(manifest: Manifest, spec: Mapping[Any, Any]) -> dict[str, Any]:
    """spec.priority (absent: left out) and spec.resources as queue.upserted carries them.

    A resource or setting the object leaves out is 0, as KAI reads it (its Go zero value,
    pkg/apis/scheduling/v2/resources.go): the wire's own defaults never apply to a Queue.
    A Queue without spec.resources (absent or null) gets KAI's zero quota, limit and weight
    for every resource (pkg/scheduler/api/queue_info/queue_info.go getQueueQuota), never
    "unmanaged": KAI schedules nothing in it.
    """
    shares: dict[str, Any] = {}
    priority = spec.get("priority")
    if priority is not None:
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise manifest.error("spec.priority", f"must be an integer, got {_described(priority)}")
        shares["priority"] = priority
    # Fields KAI does not have (another version's, e.g. lendingLimit) are ignored, as KAI's
    # scheduler ignores them.
    resources = _mapping(manifest, spec.get("resources"), "spec.resources")
    shares["resources"] = {
        name: _queue_resource(manifest, resources.get(name), f"spec.resources.{name}")
        for name in QUEUE_RESOURCES
    }
    return shares


def _queue_resource(manifest: Manifest, value: Any, field: str) -> dict[str, float]:
    settings = _mapping(manifest, value, field)
    resource: dict[str, float] = {}
    for key in QUEUE_RESOURCE_SETTINGS:
        amount = settings.get(key, 0)
        if isinstance(amount, bool) or not isinstance(amount, int | float):
            raise manifest.error(f"{field}.{key}", f"must be a number, got {_described(amount)}")
        resource[key] = float(amount)
    return resource


def _expect_queue(manifest: Manifest, body: Mapping[Any, Any]) -> None:
    kind, api_version = body.get("kind"), body.get("apiVersion")
    if kind is None:
        hint = (
            "; this looks like a scheduler config: use `minruntime config apply`"
            if "tiers" in body
            else ""
        )
        raise manifest.error("kind", f"required field is missing (expected {QUEUE_KIND}){hint}")
    if kind != QUEUE_KIND:
        hint = (
            "; use `minruntime config apply` for the scheduler config"
            if kind == "ConfigMap"
            else ""
        )
        raise manifest.error(
            "kind", f"a {_kind_of(body)} is not accepted here: {_ACCEPTED_QUEUES}{hint}"
        )
    if api_version is None:
        raise manifest.error(
            "apiVersion", f"required field is missing (expected {QUEUE_API_VERSION})"
        )
    if api_version != QUEUE_API_VERSION:
        raise manifest.error(
            "apiVersion",
            f"{_described(api_version)} is not supported: use {QUEUE_API_VERSION} "
            "(the Queue version with preemptMinRuntime and reclaimMinRuntime)",
        )


def _node_pool(
    manifest: Manifest, metadata: Mapping[Any, Any], node_pool_label: str, unlabelled: str | None
) -> str | None:
    """The queue's node pool by KAI's shard rule: its label's value, else ``unlabelled``."""
    if not node_pool_label:
        return None
    labels = _mapping(manifest, metadata.get("labels"), "metadata.labels")
    value = labels.get(node_pool_label)
    if value is None or value == "":
        return unlabelled
    field = f"metadata.labels[{node_pool_label!r}]"
    if not isinstance(value, str) or len(value) > MAX_LABEL:
        raise manifest.error(field, f"must be a node pool name of at most {MAX_LABEL} characters")
    return value


def _metadata_name(manifest: Manifest, metadata: Mapping[Any, Any]) -> str:
    name = metadata.get("name")
    if name is None:
        raise manifest.error("metadata.name", "required field is missing (the queue's name)")
    if not isinstance(name, str) or not name:
        raise manifest.error("metadata.name", f"must be a non-empty string, got {_described(name)}")
    return name


def _queue_duration(manifest: Manifest, spec: Mapping[Any, Any], field: str) -> timedelta | None:
    value = spec.get(field)
    if value is None:
        return None  # unset: inherit from the parent queue
    if not isinstance(value, str):
        raise manifest.error(
            f"spec.{field}",
            f'must be a duration string such as "20s" (quote it), got {_described(value)}',
        )
    try:
        return parse_duration(value)
    except MinRuntimeError as exc:
        raise manifest.error(f"spec.{field}", str(exc)) from exc


# -- the scheduler config -> config.updated ------------------------------------------------------


def config_update(
    manifests: Sequence[Manifest], node_pool: str = DEFAULT_NODE_POOL
) -> ConfigUpdatedData:
    """The config.updated data of the minruntime plugin's arguments in the one scheduler config.

    A plugin without `arguments` gets the documented defaults; so does a null argument.
    """
    if not node_pool:
        raise ManifestError("the node pool name must not be empty")
    if not manifests:
        raise ManifestError("nothing to apply: no scheduler config given")
    configs = [(manifest, *_scheduler_config(manifest)) for manifest in manifests]
    if len(configs) > 1:
        raise configs[1][0].error(
            "",
            f"a second scheduler config (the first is {configs[0][0].where}); "
            "apply one node pool's scheduler config at a time",
        )
    manifest, prefix, config = configs[0]
    path, plugin = _minruntime_plugin(manifest, prefix, config)
    arguments = _plugin_config(manifest, f"{path}.arguments", plugin.get("arguments"))
    return ConfigUpdatedData.from_config(node_pool, arguments)


def _scheduler_config(manifest: Manifest) -> tuple[str, Mapping[Any, Any]]:
    """(field prefix, the scheduler config mapping) of a bare config or its ConfigMap."""
    body = _object(manifest)
    kind = body.get("kind")
    if kind is None and "apiVersion" not in body:
        if "tiers" not in body:
            raise manifest.error(
                "tiers",
                "required field is missing: a KAI scheduler config lists its plugins under "
                f"tiers[].plugins[] ({_ACCEPTED_CONFIG})",
            )
        return "", body
    if kind != "ConfigMap" or body.get("apiVersion") != "v1":
        hint = "; use `minruntime queues apply` for queues" if kind == QUEUE_KIND else ""
        raise manifest.error(
            "kind", f"a {_kind_of(body)} is not accepted here: {_ACCEPTED_CONFIG}{hint}"
        )
    data = _mapping(manifest, body.get("data"), "data")
    if CONFIG_MAP_KEY not in data:
        found = ", ".join(sorted(str(key) for key in data)) or "none"
        raise manifest.error(
            "data",
            f'no "{CONFIG_MAP_KEY}" key (found: {found}); KAI\'s scheduler ConfigMap holds the '
            "scheduler config there",
        )
    text = data[CONFIG_MAP_KEY]
    if not isinstance(text, str):
        raise manifest.error(
            _CONFIG_MAP_FIELD, f"must be the scheduler config as a string, got {_described(text)}"
        )
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise manifest.error(_CONFIG_MAP_FIELD, f"not valid YAML: {_yaml_problem(exc)}") from exc
    if not isinstance(config, Mapping):
        raise manifest.error(
            _CONFIG_MAP_FIELD, f"must hold a mapping with tiers:, got {_described(config)}"
        )
    if "tiers" not in config:
        raise manifest.error(f"{_CONFIG_MAP_FIELD}.tiers", "required field is missing")
    return f"{_CONFIG_MAP_FIELD}.", config


def _minruntime_plugin(
    manifest: Manifest, prefix: str, config: Mapping[Any, Any]
) -> tuple[str, Mapping[Any, Any]]:
    """(path, plugin) of the one minruntime entry in tiers[].plugins[]."""
    tiers = config.get("tiers")
    if not isinstance(tiers, list):
        raise manifest.error(f"{prefix}tiers", f"must be a list of tiers, got {_described(tiers)}")
    found: list[tuple[str, Mapping[Any, Any]]] = []
    names: list[str] = []
    for tier_number, tier in enumerate(tiers):
        at = f"{prefix}tiers[{tier_number}]"
        if not isinstance(tier, Mapping):
            raise manifest.error(at, f"must be a mapping with plugins:, got {_described(tier)}")
        plugins = tier.get("plugins") or []
        if not isinstance(plugins, list):
            raise manifest.error(f"{at}.plugins", f"must be a list, got {_described(plugins)}")
        for plugin_number, plugin in enumerate(plugins):
            path = f"{at}.plugins[{plugin_number}]"
            name = plugin.get("name") if isinstance(plugin, Mapping) else None
            if not isinstance(plugin, Mapping) or not isinstance(name, str):
                raise manifest.error(path, "must be a mapping with a name")
            names.append(name)
            if name == PLUGIN_NAME:
                found.append((path, plugin))
    if not found:
        raise manifest.error(
            f"{prefix}tiers",
            f"no {PLUGIN_NAME} plugin (plugins: {', '.join(names) or 'none'}); add "
            f"`- name: {PLUGIN_NAME}` with its arguments to a tier's plugins",
        )
    if len(found) > 1:
        raise manifest.error(
            found[1][0], f"the {PLUGIN_NAME} plugin is listed twice (also at {found[0][0]})"
        )
    return found[0]


def _plugin_config(manifest: Manifest, at: str, arguments: Any) -> MinRuntimeConfig:
    """The core's config from the plugin arguments, each problem reported at its argument."""
    if arguments is None:
        return MinRuntimeConfig()
    if not isinstance(arguments, Mapping):
        raise manifest.error(
            at, f"must be a mapping of argument names to strings, got {_described(arguments)}"
        )
    named = {str(key): value for key, value in arguments.items()}
    try:  # unknown names first, in the core's words
        MinRuntimeConfig.from_arguments(dict.fromkeys(named))
    except MinRuntimeError as exc:
        raise manifest.error(at, str(exc)) from exc
    for key, value in named.items():
        if value is not None and not isinstance(value, str):
            raise manifest.error(
                f"{at}.{key}",
                f"must be a string (KAI plugin arguments are strings; quote it), "
                f"got {_described(value)}",
            )
        try:
            MinRuntimeConfig.from_arguments({key: value})
        except MinRuntimeError as exc:
            raise manifest.error(f"{at}.{key}", _without_argument(str(exc), key)) from exc
    try:
        return MinRuntimeConfig.from_arguments(named)
    except MinRuntimeError as exc:  # a combination no single argument shows
        raise manifest.error(at, str(exc)) from exc


def _without_argument(message: str, argument: str) -> str:
    # The core names the argument itself; the path in front already does.
    for prefix in (f"{argument}: ", f"{argument} "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


# -- shared helpers ------------------------------------------------------------------------------


def _object(manifest: Manifest) -> Mapping[Any, Any]:
    if not isinstance(manifest.body, Mapping):
        raise manifest.error(
            "", f"not a Kubernetes object: expected a mapping, got {_described(manifest.body)}"
        )
    return manifest.body


def _mapping(manifest: Manifest, value: Any, field: str) -> Mapping[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise manifest.error(field, f"must be a mapping, got {_described(value)}")
    return value


def _kind_of(body: Mapping[Any, Any]) -> str:
    api_version = body.get("apiVersion")
    kind = str(body.get("kind"))
    return f"{kind} ({api_version})" if isinstance(api_version, str) else kind


def _described(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return repr(value)
    return json.dumps(value, default=str)


def _first_problem(exc: ValidationError) -> str:
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"])
    return f"{field}: {error['msg']}" if field else str(error["msg"])
