"""Harness speed-ups keep every stored bit: the rows of a small sweep hash to the value the code before them stored
(F6 / F7 prepared cases' references remembered from the source case's: ``faults.precondition``)."""

import hashlib
import json

import pytest

from conformance.sweep.cells import SweepSpec, layer_cells
from conformance.sweep.distributed import run_cells
from conformance.sweep.runner import SweepTask
from conformance.sweep.store import SweepStore

#: sha256 of the deterministic rows below, stored by commit 7559f9d (before the F6 / F7 references were remembered)
ROWS_SHA256 = "daea77519303b7e7c2a72ab5da8f3631e278a1a2be7f25308bfc73f34f51d915"


def test_a_small_sweep_stores_the_rows_it_stored_before(tmp_path):
    from reference.model.capture import default_capture_set

    cs = default_capture_set()
    if cs is None:
        pytest.skip("default captures not built")
    spec = SweepSpec("cpu", "digest", str(cs.dir), cs.model_digest, "", {"windows": 1, "window_len": 8}, False)
    names = cs.layer_names()
    cells = layer_cells([names[1]], ["F1", "F4", "F6", "F7", "F9"], ["one", "1%", "all"], ["own", "pow2"], [0])
    with SweepStore(tmp_path / "s.sqlite", {"t": 1}) as s:
        run_cells([SweepTask(c, spec) for c in cells], s, workers=1, quiet=True)
        rows = s.rows(deterministic_only=True)
    assert len(rows) == 210  # 30 cells x 7 checks (C1-C6, C8)
    assert hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest() == ROWS_SHA256
