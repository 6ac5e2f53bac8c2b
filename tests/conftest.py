"""Shared pytest configuration: a deterministic hypothesis profile, and
``tests/helpers/`` on ``sys.path`` for the shared test helpers.

``ci`` (default): derandomized, 30 examples, no deadline -- the same examples
on every run, so CI is reproducible. Override with HYPOTHESIS_PROFILE.
"""

import os
import sys
from pathlib import Path

from hypothesis import settings

settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Test helpers (buggy_kernels, tiny_qwen3) live in tests/helpers/ and are
# imported by name from every sub-folder and by subprocess tests
# (``--kernel=buggy_kernels:<fn>``). Not tests/ itself: its sub-folders are
# named like the packages and would shadow them. Test modules are imported
# with pytest's importlib mode (pyproject), so equal basenames never clash.
HELPERS = Path(__file__).resolve().parent / "helpers"
sys.path.insert(0, str(HELPERS))
