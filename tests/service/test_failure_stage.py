"""The `stage` of a failed cycle follows from the error's class: every icetail error names a known stage."""

from __future__ import annotations

import inspect

import pytest

from icetail.kernel import errors
from icetail.kernel.errors import (
    CatalogNotFoundError,
    CatalogUnavailableError,
    ConfigError,
    DataFileError,
    IcetailError,
    MetadataError,
    SinkError,
    SinkRejectedError,
    StateConflictError,
    StateError,
    StorageUnavailableError,
)
from icetail.monitor.engine.startup import CursorExpiredError, CursorLostError
from icetail.monitor.service.failures import failure_stage
from icetail.monitor.service.metrics import FailureStage


def test_every_error_class_names_a_known_stage() -> None:
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, IcetailError)]
    assert len(classes) > 15
    for cls in [*classes, CursorLostError]:
        assert cls.stage in {s.value for s in FailureStage}, cls


@pytest.mark.parametrize(
    ("error", "stage"),
    [
        (CatalogUnavailableError("x"), FailureStage.CATALOG),
        (ConfigError("x"), FailureStage.PLAN),
        (MetadataError("x"), FailureStage.PLAN),
        (CatalogNotFoundError("x"), FailureStage.CATALOG),
        (StateError("x"), FailureStage.STATE),
        (SinkError("x"), FailureStage.SINK),
        (CursorExpiredError("x"), FailureStage.PLAN),
        (StateConflictError("x"), FailureStage.STATE),
        (SinkRejectedError("x"), FailureStage.SINK),
        (DataFileError("x"), FailureStage.READ),
        (StorageUnavailableError("x"), FailureStage.READ),
        (RuntimeError("not ours"), FailureStage.READ),
    ],
)
def test_failure_stage_is_the_class_stage(error: BaseException, stage: FailureStage) -> None:
    assert failure_stage(error) is stage
