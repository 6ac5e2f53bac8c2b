"""The SweepSpec of the shipped default captures with the ``cpu`` kernel,
for the sweep's per-cell budget tests (digests, read-backs)."""

import pytest

from conformance.sweep.cells import SweepSpec


def default_capture_sweep_spec(label: str) -> SweepSpec:
    """``cpu`` kernel over the default model's captures (own and power-of-two
    nearest checkpoints), no model checks; skips when the captures are not built."""
    from reference.model.capture import default_capture_set

    cs = default_capture_set()
    if cs is None:
        pytest.skip("default captures not built")
    dirs = tuple((k, str(cs.checkpoint(k).dir)) for k in ("own", "pow2-nearest"))
    return SweepSpec(
        "cpu", label, str(cs.dir), cs.model_digest, "", {"windows": 1}, model_checks=False, checkpoint_dirs=dirs
    )
