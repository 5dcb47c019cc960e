"""The project's CRDs against KAI-Scheduler's: every field KAI's Queue, PodGroup, BindRequest and
Topology have is in ours, typed alike; `semi-preemptible` only through the documented variant;
`stack up --kube --kai-crds PATH` refuses a bad path in one line before starting anything.

KAI's own CRD files are read from a KAI source checkout at test time only
(``MINRUNTIME_KAI_SOURCE``, else /work/kai-src/kai); without one those tests are skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from minruntime.cli import main
from minruntime.cluster import mapping
from minruntime.errors import StackError
from minruntime_dev.stack.crds import (
    CrdChoice,
    chosen_crds,
    crd_directory,
    read_crds,
    with_semi_preemptible,
)
from minruntime_dev.standin import pool_labels

KAI_SOURCE = Path(os.environ.get("MINRUNTIME_KAI_SOURCE", "/work/kai-src/kai"))
KAI_CRDS = KAI_SOURCE / "deployments" / "kai-scheduler" / "crds"
NAMES = (
    "queues.scheduling.run.ai",
    "podgroups.scheduling.run.ai",
    "bindrequests.scheduling.run.ai",
    "topologies.kai.scheduler",
)
needs_kai = pytest.mark.skipif(
    not KAI_CRDS.is_dir(), reason=f"no KAI source checkout at {KAI_SOURCE} (MINRUNTIME_KAI_SOURCE)"
)


def ours(name: str) -> dict[str, Any]:
    (crd,) = [c for c in read_crds(crd_directory()) if c["metadata"]["name"] == name]
    return crd


def kais(name: str) -> dict[str, Any]:
    (crd,) = [c for c in read_crds(KAI_CRDS) if c["metadata"]["name"] == name]
    return crd


def schema(crd: Mapping[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    found: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return found


def fields(node: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every property of a structural schema by its path (`[]` an item, `{}` a map value)."""
    yield path or ".", node
    for name, child in (node.get("properties") or {}).items():
        yield from fields(child, f"{path}.{name}")
    if isinstance(node.get("items"), Mapping):
        yield from fields(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from fields(node["additionalProperties"], f"{path}{{}}")


def kind_of(node: Mapping[str, Any]) -> str:
    """The type a field accepts, as the API server checks it."""
    if node.get("x-kubernetes-int-or-string"):
        return "int-or-string"
    if node.get("x-kubernetes-preserve-unknown-fields") and "properties" not in node:
        return "anything"
    return str(node.get("type"))


def test_the_project_ships_the_four_crds_a_real_kai_needs() -> None:
    assert sorted(crd["metadata"]["name"] for crd in read_crds(crd_directory())) == sorted(NAMES)


@needs_kai
@pytest.mark.parametrize("name", NAMES)
def test_every_field_of_kais_crd_is_in_ours_and_typed_alike(name: str) -> None:
    mine, theirs = ours(name), kais(name)
    assert mine["spec"]["scope"] == theirs["spec"]["scope"]
    assert mine["spec"]["names"] == theirs["spec"]["names"]
    (my_version,) = mine["spec"]["versions"]
    (their_version,) = theirs["spec"]["versions"]
    assert my_version["name"] == their_version["name"]
    assert my_version.get("subresources") == their_version.get("subresources")
    my_fields = dict(fields(schema(mine)))
    missing, retyped, stricter = [], [], []
    for path, theirs_field in fields(schema(theirs)):
        mine_field = my_fields.get(path)
        if mine_field is None:
            if not any(kind_of(my_fields.get(p, {})) == "anything" for p in _parents(path)):
                missing.append(path)
            continue
        if kind_of(mine_field) not in (kind_of(theirs_field), "anything"):
            retyped.append(f"{path}: {kind_of(mine_field)} != {kind_of(theirs_field)}")
        # Ours never refuses what KAI's accepts: no more required fields, no higher minimum.
        if not set(mine_field.get("required") or ()) <= set(theirs_field.get("required") or ()):
            stricter.append(f"{path}: required {mine_field['required']}")
        if mine_field.get("minimum", -(2**63)) > theirs_field.get("minimum", -(2**63)):
            stricter.append(f"{path}: minimum {mine_field['minimum']}")
        if "enum" in theirs_field and mine_field.get("enum") != theirs_field["enum"]:
            stricter.append(f"{path}: enum {mine_field.get('enum')} != {theirs_field['enum']}")
    assert (missing, retyped, stricter) == ([], [], [])


def _parents(path: str) -> list[str]:
    parts = path.replace("[]", ".[]").split(".")
    return [".".join(parts[:i]).replace(".[]", "[]") for i in range(1, len(parts))]


def test_the_podgroup_crd_follows_kai_main_minmember_zero_and_two_preemptibilities() -> None:
    spec = schema(ours("podgroups.scheduling.run.ai"))["properties"]["spec"]["properties"]
    assert spec["minMember"]["minimum"] == 0
    assert spec["subGroups"]["items"]["properties"]["minMember"]["minimum"] == 0
    assert spec["preemptibility"]["enum"] == ["preemptible", "non-preemptible"]


def test_the_semi_preemptible_variant_adds_the_third_value_once() -> None:
    crd = ours("podgroups.scheduling.run.ai")
    patched = with_semi_preemptible(crd)
    enum = schema(patched)["properties"]["spec"]["properties"]["preemptibility"]["enum"]
    assert enum == ["preemptible", "non-preemptible", "semi-preemptible"]
    assert with_semi_preemptible(patched) == patched  # a CRD that has it already: unchanged
    assert schema(crd)["properties"]["spec"]["properties"]["preemptibility"]["enum"] == [
        "preemptible",
        "non-preemptible",
    ]
    (chosen,) = [
        c
        for c in chosen_crds(CrdChoice(semi_preemptible=True))
        if c["metadata"]["name"] == "podgroups.scheduling.run.ai"
    ]
    assert chosen == patched


@needs_kai
def test_the_variant_patches_kai_mains_crd_and_kai_crds_replace_ours_by_name() -> None:
    kai = kais("podgroups.scheduling.run.ai")
    enum = schema(with_semi_preemptible(kai))["properties"]["spec"]["properties"]
    assert enum["preemptibility"]["enum"][-1] == "semi-preemptible"
    chosen = {c["metadata"]["name"]: c for c in chosen_crds(CrdChoice(kai_crds=KAI_CRDS))}
    assert set(chosen) >= set(NAMES)
    assert chosen["queues.scheduling.run.ai"] == kais("queues.scheduling.run.ai")


def test_a_bad_crd_path_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.yaml").write_text("kind: [unclosed\n")
    (tmp_path / "nameless.yaml").write_text("kind: CustomResourceDefinition\nmetadata: {}\n")
    cases = {
        tmp_path / "nowhere": "no such CRD file or directory",
        tmp_path / "empty": "no CustomResourceDefinition found in",
        tmp_path / "bad.yaml": "is not YAML",
        tmp_path / "nameless.yaml": "a CustomResourceDefinition without metadata.name",
    }
    for path, message in cases.items():
        with pytest.raises(StackError) as refused:
            read_crds(path)
        assert message in str(refused.value)
        assert "\n" not in str(refused.value)


def test_stack_up_refuses_a_bad_kai_crds_path_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "crds"
    assert main(["stack", "up", "--kube", "--kai-crds", str(missing)]) == 3
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"minruntime: error: no such CRD file or directory: {missing}"
    ]
    assert main(["stack", "up", "--semi-preemptible"]) == 3
    assert "go with --kube" in capsys.readouterr().err


def test_objects_of_the_default_pool_carry_no_node_pool_label() -> None:
    assert pool_labels("default") == {}
    assert pool_labels("a100") == {mapping.NODE_POOL_LABEL: "a100"}


@pytest.mark.parametrize(("min_member", "expected"), [(None, 1), (0, 0), (3, 3)])
def test_min_member_zero_is_no_gang_and_absent_is_one(
    min_member: int | None, expected: int
) -> None:
    spec: dict[str, Any] = {"queue": "q"}
    if min_member is not None:
        spec["minMember"] = min_member
    podgroup = {"metadata": {"name": "pg", "namespace": "ns", "uid": "u"}, "spec": spec}
    pod = {
        "metadata": {"name": "pg-0", "namespace": "ns", "uid": "p"},
        "spec": {"containers": []},
    }
    data = mapping.submission_data(podgroup, [pod], priority=50)
    assert data["subGroups"] == [{"name": "default", "minAvailable": expected}]


def test_the_variant_file_is_a_json_patch_kubectl_reads() -> None:
    operations = yaml.safe_load(
        (crd_directory() / "variants" / "semi-preemptible.yaml").read_text()
    )
    assert [op["op"] for op in operations] == ["test", "add"]
    assert all(op["path"].startswith("/spec/versions/0/") for op in operations)
