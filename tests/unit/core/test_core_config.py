from __future__ import annotations

from datetime import timedelta

import pytest
from core_testkit import s

from minruntime.core import (
    DEFAULT_REQUEUE_DELAY,
    InvalidConfigError,
    MinRuntimeConfig,
    NodePoolConfigs,
    ReclaimResolveMethod,
)


def test_defaults() -> None:
    config = MinRuntimeConfig()
    assert config.default_preempt_min_runtime == timedelta(0)
    assert config.default_reclaim_min_runtime == timedelta(0)
    assert config.reclaim_resolve_method == "lca"
    assert config.reclaim_resolve_method is ReclaimResolveMethod.LCA
    assert config.default_requeue_delay == DEFAULT_REQUEUE_DELAY == timedelta(minutes=5)


def test_keyword_only() -> None:
    with pytest.raises(TypeError):
        MinRuntimeConfig(s(1))  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reclaim_resolve_method": "nearest"}, "must be one of lca, queue, got 'nearest'"),
        ({"reclaim_resolve_method": ""}, "must be one of"),
        ({"default_preempt_min_runtime": s(-1)}, "defaultPreemptMinRuntime must not be negative"),
        ({"default_reclaim_min_runtime": s(-60)}, "defaultReclaimMinRuntime must not be negative"),
        ({"default_requeue_delay": s(-1)}, "defaultRequeueDelay must not be negative"),
        ({"default_requeue_delay": s(0)}, "defaultRequeueDelay must be positive"),
        ({"default_preempt_min_runtime": "5m"}, "must be a duration"),
    ],
)
def test_invalid_configs(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message) as caught:
        MinRuntimeConfig(**kwargs)  # type: ignore[arg-type]
    assert caught.value.kind == "invalid_config"
    assert isinstance(caught.value, ValueError)


def test_from_arguments_parses_kai_argument_names() -> None:
    config = MinRuntimeConfig.from_arguments(
        {
            "defaultPreemptMinRuntime": "10m",
            "defaultReclaimMinRuntime": "1h30m",
            "reclaimResolveMethod": "queue",
            "defaultRequeueDelay": "2m",
        }
    )
    assert config == MinRuntimeConfig(
        default_preempt_min_runtime=s(600),
        default_reclaim_min_runtime=s(5400),
        reclaim_resolve_method="queue",
        default_requeue_delay=s(120),
    )
    assert MinRuntimeConfig.from_arguments(config.to_arguments()) == config


def test_from_arguments_absent_or_null_take_defaults() -> None:
    assert MinRuntimeConfig.from_arguments({}) == MinRuntimeConfig()
    assert MinRuntimeConfig.from_arguments({"reclaimResolveMethod": None}) == MinRuntimeConfig()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"defaultPreemptMinRuntime": "5"}, "defaultPreemptMinRuntime: invalid duration '5'"),
        ({"defaultReclaimMinRuntime": "-5m"}, "defaultReclaimMinRuntime: .*negative"),
        ({"defaultRequeueDelay": "0s"}, "defaultRequeueDelay must be positive"),
        ({"reclaimResolveMethod": "LCA"}, "reclaimResolveMethod must be one of"),
        (
            {"defaultPreemptMinRunTime": "5m"},
            "unknown minruntime argument.*defaultPreemptMinRunTime",
        ),
    ],
)
def test_from_arguments_errors_name_the_argument(arguments: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        MinRuntimeConfig.from_arguments(arguments)


def test_node_pool_fallback() -> None:
    custom = MinRuntimeConfig(default_preempt_min_runtime=s(1))
    fallback = MinRuntimeConfig(default_preempt_min_runtime=s(2))
    empty = NodePoolConfigs()
    assert empty.for_pool("gpu-a") == MinRuntimeConfig()
    assert empty.for_pool(None) == MinRuntimeConfig()
    configs = NodePoolConfigs({"gpu-a": custom})
    assert configs.for_pool("gpu-a") == custom
    assert configs.for_pool("gpu-b") == MinRuntimeConfig()
    configs = NodePoolConfigs({"gpu-a": custom, "default": fallback})
    assert configs.for_pool("gpu-b") == fallback
    assert configs.for_pool(None) == fallback
    assert configs.for_pool("gpu-a") == custom
    assert sorted(configs) == ["default", "gpu-a"]
    assert len(empty) == 0
