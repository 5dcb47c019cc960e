"""The scratch go.mod that builds kube-apiserver and etcd from the Go module proxy."""

from __future__ import annotations

import pytest

from minruntime.errors import StackError
from minruntime_dev.stack.kube_build import scratch_go_mod

UPSTREAM = """module k8s.io/kubernetes

go 1.24.0

require (
\tgithub.com/example/dep v1.2.3
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
\tk8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-2025
)
"""


def test_every_staging_module_is_replaced_by_its_published_version() -> None:
    text = scratch_go_mod(UPSTREAM, "v1.33.13", "v3.5.21")
    assert "\tk8s.io/api => k8s.io/api v0.33.13\n" in text
    assert "\tk8s.io/client-go => k8s.io/client-go v0.33.13\n" in text
    # Only the ./staging replacements: a pinned third-party replace is Go's to resolve.
    assert "kube-openapi" not in text
    assert "\tk8s.io/kubernetes v1.33.13\n\tgo.etcd.io/etcd/server/v3 v3.5.21\n" in text
    assert "\ngo 1.24.0\n" in text


def test_an_upstream_without_staging_modules_is_one_line() -> None:
    with pytest.raises(StackError, match="no staging modules"):
        scratch_go_mod("module k8s.io/kubernetes\n\ngo 1.24.0\n", "v1.33.13", "v3.5.21")
