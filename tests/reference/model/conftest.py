"""Fixtures of the capture tests: the shipped capture set of the default model."""

import pytest

from reference.model.capture import default_capture_set


@pytest.fixture(scope="module")
def cs():
    """The shipped, verified capture set (skips where none is built)."""
    got = default_capture_set()
    if got is None:
        pytest.skip("no shipped capture set")
    return got
