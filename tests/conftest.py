"""Shared pytest configuration: a deterministic hypothesis profile, ``tests/helpers/`` on ``sys.path`` for
the shared test helpers, and every test outside a conformance run.

``ci`` (default): derandomized, 30 examples, no deadline -- the same examples
on every run, so CI is reproducible. Override with HYPOTHESIS_PROFILE.
"""

import os
import signal
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from reference.fileio import CACHE_ENV, cache_location

settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Test helpers (buggy_kernels, tiny_qwen3) live in tests/helpers/ and are
# imported by name from every sub-folder and by subprocess tests
# (``--kernel=buggy_kernels:<fn>``). Not tests/ itself: its sub-folders are
# named like the packages and would shadow them. Test modules are imported
# with pytest's importlib mode (pyproject), so equal basenames never clash.
HELPERS = Path(__file__).resolve().parent / "helpers"
sys.path.insert(0, str(HELPERS))

# The artifact cache named once for every test and subprocess: pytester points HOME at a temporary folder, which
# would move the default cache (~/.cache/int8conf) there and rebuild the default suite's cases in every such test.
# Tests of a cold cache name their own folder.
os.environ.setdefault(CACHE_ENV, str(cache_location()))


@pytest.fixture(autouse=True)
def _sigint_as_python_sets_it():
    """Each test starts with SIGINT's default handler and leaves the handler as it found it: an in-process
    ``int8conf`` command (a test's, or a module fixture's) installs ``runtime.graceful_stop``'s recorder for the rest
    of its process, under which a kernel's own KeyboardInterrupt is its failure - a later test of the runner's
    KeyboardInterrupt would otherwise depend on the tests run before it in its worker."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(autouse=True)
def _outside_a_conformance_run(monkeypatch):
    """Each test starts outside a conformance run: an in-process sweep marks its process as one
    (``kernels.spec.enter_conformance_run``), which would change the Triton built-in's choices for later tests."""
    monkeypatch.delenv("INT8CONF_CONFORMANCE_RUN", raising=False)
