"""Results of a pytest item carried from an xdist worker to the controller on the item's own report
(``user_properties``), so the controller holds every finished result even if a worker never shuts
down cleanly; the controller takes the entry off before other plugins see the report."""

from __future__ import annotations

import base64
import pickle
from typing import Any, Callable, Optional

import pytest


def attach(report, key: str, payload: Any) -> None:
    """Append picklable ``payload`` to ``report.user_properties`` under ``key`` as base64 text (every
    serialiser of reports carries str)."""
    blob = base64.b64encode(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    report.user_properties.append((key, blob.decode("ascii")))


def take(report, key: str) -> Optional[Any]:
    """Remove and return the payload :func:`attach` put on ``report`` under ``key`` (None if there is none)."""
    props = getattr(report, "user_properties", None) or []
    for i, (name, value) in enumerate(props):
        if name == key:
            del props[i]
            return pickle.loads(base64.b64decode(value))
    return None


class _Merger:
    """A pytest plugin object of the controller: hands each report's payload under ``key`` to ``merge``."""

    def __init__(self, key: str, merge: Callable[[Any], None]):
        self.key, self.merge = key, merge

    @pytest.hookimpl(tryfirst=True)  # before JUnit XML or a report log sees the payload
    def pytest_runtest_logreport(self, report) -> None:
        payload = take(report, self.key)
        if payload is not None:
            self.merge(payload)


def merge_on_controller(config, key: str, merge: Callable[[Any], None]) -> None:
    """Register ``merge(payload)`` for every report that carries ``key``, on the controller (or a run without
    xdist); nothing in an xdist worker."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Merger(key, merge), f"{key}-xdist-merger")
