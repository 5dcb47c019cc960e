"""The requeue worker's and the expiry emitter's options come from the settings of their names
(``bootstrap.options_from``): a renamed setting or option fails here, not at a worker's start."""

from __future__ import annotations

import pytest

from minruntime.bootstrap import options_from
from minruntime.requeue.expiry import ExpiryOptions
from minruntime.requeue.worker import WorkerOptions
from minruntime.settings import Settings


@pytest.mark.parametrize(
    ("cls", "prefix"), [(WorkerOptions, "requeue_"), (ExpiryOptions, "protection_")]
)
def test_every_option_is_read_from_its_setting(cls: type, prefix: str) -> None:
    fields = [name for name in cls._fields if name != "topic"]
    assert fields
    chosen: dict[str, object] = {}
    for number, name in enumerate(fields, start=2):
        default = getattr(Settings(), prefix + name)  # AttributeError: no such setting
        chosen[name] = (not default) if isinstance(default, bool) else default * number
    settings = Settings.model_validate({prefix + name: value for name, value in chosen.items()})

    options = options_from(settings, cls, prefix, "the-topic")

    assert options.topic == "the-topic"
    assert {name: getattr(options, name) for name in chosen} == chosen
