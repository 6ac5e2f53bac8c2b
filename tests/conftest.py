"""Shared pytest configuration: a deterministic hypothesis profile.

``ci`` (default): derandomized, 30 examples, no deadline -- the same examples
on every run, so CI is reproducible. Override with HYPOTHESIS_PROFILE.
"""

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=30, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
